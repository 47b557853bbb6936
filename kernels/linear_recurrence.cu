// cuscan: first-order linear recurrences h[t] = a[t] * h[t-1] + x[t] on the GPU.
//
// Compiled at run time by NVRTC (cupy.RawModule), one instantiation per storage
// type S, named through name_expressions. The source includes no header, so it
// compiles with NVRTC alone.
//
// Layout. Every operand is seen as (outer, T, inner) with its own three strides
// in elements (64-bit, signed: broadcast operands have stride 0, reversed views
// a negative time stride). A "channel" is one (outer, inner) pair, numbered
// c = o * inner + i, so that consecutive threads take consecutive inner indices
// and read coalesced when the channels are contiguous in memory. The initial
// state is (outer, inner) with two strides; a null pointer means zero.
//
// Arithmetic. Values are loaded into the accumulator type A (float for the half
// types), combined there, and rounded once on store. The combine step of the
// scan is (a1, x1) . (a2, x2) = (a1 * a2, a2 * x1 + x2): P and R below.

namespace cuscan {

typedef long long index_t;

// ---- types ------------------------------------------------------------------

template <typename T>
struct complex {
    T re, im;
};

template <typename T>
__device__ __forceinline__ complex<T> operator+(complex<T> a, complex<T> b) {
    return {a.re + b.re, a.im + b.im};
}

template <typename T>
__device__ __forceinline__ complex<T> operator*(complex<T> a, complex<T> b) {
    return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
}

struct half {
    unsigned short bits;
};

struct bfloat16 {
    unsigned short bits;
};

// Storage type -> accumulator type, loads, stores, zero, conjugate, finiteness.
template <typename S>
struct traits;

template <>
struct traits<float> {
    typedef float acc;
    static __device__ __forceinline__ float load(float v) { return v; }
    static __device__ __forceinline__ float store(float v) { return v; }
};

template <>
struct traits<double> {
    typedef double acc;
    static __device__ __forceinline__ double load(double v) { return v; }
    static __device__ __forceinline__ double store(double v) { return v; }
};

template <>
struct traits<half> {
    typedef float acc;
    static __device__ __forceinline__ float load(half v) {
#ifdef __CUDA_ARCH__
        float f;
        asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.bits));
        return f;
#else  // compiled for the host by the test suite's kernel emulator, which supplies these
        return cuscan_host_half_to_float(v.bits);
#endif
    }
    static __device__ __forceinline__ half store(float f) {
        half v;
#ifdef __CUDA_ARCH__
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(v.bits) : "f"(f));
#else
        v.bits = cuscan_host_float_to_half(f);
#endif
        return v;
    }
};

template <>
struct traits<bfloat16> {
    typedef float acc;
    static __device__ __forceinline__ float load(bfloat16 v) {
        return __uint_as_float(static_cast<unsigned int>(v.bits) << 16);
    }
    static __device__ __forceinline__ bfloat16 store(float f) {
        unsigned int u = __float_as_uint(f);
        bfloat16 v;
        if ((u & 0x7fffffffu) > 0x7f800000u) {
            v.bits = static_cast<unsigned short>((u >> 16) | 0x40u);  // quiet NaN, sign kept
        } else {
            u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
            v.bits = static_cast<unsigned short>(u >> 16);
        }
        return v;
    }
};

template <typename T>
struct traits<complex<T> > {
    typedef complex<T> acc;
    static __device__ __forceinline__ complex<T> load(complex<T> v) { return v; }
    static __device__ __forceinline__ complex<T> store(complex<T> v) { return v; }
};

template <typename A>
__device__ __forceinline__ A zero() { return A(0); }
template <>
__device__ __forceinline__ complex<float> zero<complex<float> >() { return {0.0f, 0.0f}; }
template <>
__device__ __forceinline__ complex<double> zero<complex<double> >() { return {0.0, 0.0}; }

template <typename A>
__device__ __forceinline__ A conj(A v) { return v; }
template <typename T>
__device__ __forceinline__ complex<T> conj(complex<T> v) { return {v.re, -v.im}; }

template <typename A>
__device__ __forceinline__ bool finite(A v) { return isfinite(v); }
template <typename T>
__device__ __forceinline__ bool finite(complex<T> v) { return isfinite(v.re) && isfinite(v.im); }

// An operand seen as (outer, T, inner): base pointer and strides in elements.
template <typename S>
struct view {
    S* data;
    index_t outer, time, inner;
    __device__ __forceinline__ S& at(index_t o, index_t t, index_t i) const {
        return data[o * outer + t * time + i * inner];
    }
};

// The initial state, (outer, inner); null means zero.
template <typename S>
struct state {
    const S* data;
    index_t outer, inner;
    __device__ __forceinline__ typename traits<S>::acc at(index_t o, index_t i) const {
        typedef typename traits<S>::acc A;
        return data ? traits<S>::load(data[o * outer + i * inner]) : zero<A>();
    }
};

#define CUSCAN_GRID_STRIDE(w, count)                                           \
    for (index_t w = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x; \
         w < (count); w += static_cast<index_t>(gridDim.x) * blockDim.x)

// ---- forward ----------------------------------------------------------------

// linear_recurrence_fwd_serial: the paper's serial baseline. One thread owns one
// channel and steps through all T elements: h = a[t] * h + x[t], h[-1] = h0.
// With `only` non-null, a thread runs only if only[c] is non-zero: this re-runs
// the channels whose chunked result cannot be trusted (see nonfinite_channels).
template <typename S>
__global__ void linear_recurrence_fwd_serial(
    const S* a_ptr, const S* x_ptr, const S* h0_ptr, S* out_ptr, const int* only,
    index_t outer, index_t length, index_t inner,
    index_t a_so, index_t a_st, index_t a_si, index_t x_so, index_t x_st, index_t x_si,
    index_t h0_so, index_t h0_si, index_t out_so, index_t out_st, index_t out_si) {
    typedef traits<S> tr;
    typedef typename tr::acc A;
    const view<const S> a = {a_ptr, a_so, a_st, a_si};
    const view<const S> x = {x_ptr, x_so, x_st, x_si};
    const view<S> out = {out_ptr, out_so, out_st, out_si};
    const state<S> h0 = {h0_ptr, h0_so, h0_si};
    CUSCAN_GRID_STRIDE(c, outer * inner) {
        if (only && !only[c]) continue;
        const index_t o = c / inner, i = c - o * inner;
        A h = h0.at(o, i);
        for (index_t t = 0; t < length; ++t) {
            h = tr::load(a.at(o, t, i)) * h + tr::load(x.at(o, t, i));
            out.at(o, t, i) = tr::store(h);
        }
    }
}

// linear_recurrence_fwd_reduce: phase 1 of Algorithm 1 (Martin & Cundy 2018).
// Time is cut into `chunks` chunks of `chunk` steps (the last may be shorter).
// One thread owns one (channel, chunk) pair and reduces it to P, the product of
// its decays, and R, its final state from a zero start, written to contiguous
// (outer, chunks, inner) arrays of the accumulator type.
template <typename S>
__global__ void linear_recurrence_fwd_reduce(
    const S* a_ptr, const S* x_ptr, typename traits<S>::acc* products,
    typename traits<S>::acc* reduced,
    index_t outer, index_t length, index_t inner, index_t chunk, index_t chunks,
    index_t a_so, index_t a_st, index_t a_si, index_t x_so, index_t x_st, index_t x_si) {
    typedef traits<S> tr;
    typedef typename tr::acc A;
    const view<const S> a = {a_ptr, a_so, a_st, a_si};
    const view<const S> x = {x_ptr, x_so, x_st, x_si};
    CUSCAN_GRID_STRIDE(w, outer * inner * chunks) {
        const index_t c = w % (outer * inner), k = w / (outer * inner);
        const index_t o = c / inner, i = c - o * inner;
        const index_t end = min(length, (k + 1) * chunk);
        A p = tr::load(a.at(o, k * chunk, i));
        A r = p * zero<A>() + tr::load(x.at(o, k * chunk, i));
        for (index_t t = k * chunk + 1; t < end; ++t) {
            const A at = tr::load(a.at(o, t, i));
            p = p * at;
            r = at * r + tr::load(x.at(o, t, i));
        }
        const index_t slot = (o * chunks + k) * inner + i;
        products[slot] = p;
        reduced[slot] = r;
    }
}

// linear_recurrence_fwd_rescan: phase 3 of Algorithm 1. One thread owns one
// (channel, chunk) pair and re-runs the serial recurrence over it from its
// carry: the initial state for chunk 0, else carries[o, k - 1, i], the state at
// the end of the previous chunk (contiguous (outer, chunks, inner), type A).
template <typename S>
__global__ void linear_recurrence_fwd_rescan(
    const S* a_ptr, const S* x_ptr, const S* h0_ptr, const typename traits<S>::acc* carries,
    S* out_ptr,
    index_t outer, index_t length, index_t inner, index_t chunk, index_t chunks,
    index_t a_so, index_t a_st, index_t a_si, index_t x_so, index_t x_st, index_t x_si,
    index_t h0_so, index_t h0_si, index_t out_so, index_t out_st, index_t out_si) {
    typedef traits<S> tr;
    typedef typename tr::acc A;
    const view<const S> a = {a_ptr, a_so, a_st, a_si};
    const view<const S> x = {x_ptr, x_so, x_st, x_si};
    const view<S> out = {out_ptr, out_so, out_st, out_si};
    const state<S> h0 = {h0_ptr, h0_so, h0_si};
    CUSCAN_GRID_STRIDE(w, outer * inner * chunks) {
        const index_t c = w % (outer * inner), k = w / (outer * inner);
        const index_t o = c / inner, i = c - o * inner;
        A h = k == 0 ? h0.at(o, i) : carries[(o * chunks + k - 1) * inner + i];
        const index_t end = min(length, (k + 1) * chunk);
        for (index_t t = k * chunk; t < end; ++t) {
            h = tr::load(a.at(o, t, i)) * h + tr::load(x.at(o, t, i));
            out.at(o, t, i) = tr::store(h);
        }
    }
}

// linear_recurrence_nonfinite_channels: P * carry + R equals the serial result
// only while all three are finite (an overflowing product times a zero state is
// NaN, the serial loop's 0). One thread owns one channel and sets flags[c] when
// any of its chunk products, reductions or carries is not finite; those channels
// are then re-run serially, so NaN and infinity propagate exactly as serially.
template <typename A>
__global__ void linear_recurrence_nonfinite_channels(
    const A* products, const A* reduced, const A* carries, int* flags,
    index_t outer, index_t inner, index_t chunks) {
    CUSCAN_GRID_STRIDE(c, outer * inner) {
        const index_t o = c / inner, i = c - o * inner;
        bool ok = true;
        for (index_t k = 0; k < chunks && ok; ++k) {
            const index_t slot = (o * chunks + k) * inner + i;
            ok = finite(products[slot]) && finite(reduced[slot]) && finite(carries[slot]);
        }
        flags[c] = !ok;
    }
}

// ---- backward ---------------------------------------------------------------
//
// The vector-Jacobian product (paper, section 2.2), with g = grad_impulses:
//   g[T-1] = go[T-1],  g[t] = go[t] + conj(a[t+1]) * g[t+1],
//   ga[t] = conj(h[t-1]) * g[t] with h[-1] = h0,  gh0 = conj(a[0]) * g[0].
// A reverse linear recurrence over go whose decays are shifted by one step; the
// kernels read a[t+1] directly, so no shifted or reversed copy is made.

// linear_recurrence_bwd_serial: one thread owns one channel and steps from
// t = T-1 down to 0, writing g and ga together (and gh0 when non-null).
template <typename S>
__global__ void linear_recurrence_bwd_serial(
    const S* go_ptr, const S* a_ptr, const S* h_ptr, const S* h0_ptr,
    S* ga_ptr, S* gx_ptr, S* gh0_ptr, const int* only,
    index_t outer, index_t length, index_t inner,
    index_t go_so, index_t go_st, index_t go_si, index_t a_so, index_t a_st, index_t a_si,
    index_t h_so, index_t h_st, index_t h_si, index_t h0_so, index_t h0_si,
    index_t ga_so, index_t ga_st, index_t ga_si, index_t gx_so, index_t gx_st, index_t gx_si,
    index_t gh0_so, index_t gh0_si) {
    typedef traits<S> tr;
    typedef typename tr::acc A;
    const view<const S> go = {go_ptr, go_so, go_st, go_si};
    const view<const S> a = {a_ptr, a_so, a_st, a_si};
    const view<const S> h = {h_ptr, h_so, h_st, h_si};
    const view<S> ga = {ga_ptr, ga_so, ga_st, ga_si};
    const view<S> gx = {gx_ptr, gx_so, gx_st, gx_si};
    const state<S> h0 = {h0_ptr, h0_so, h0_si};
    CUSCAN_GRID_STRIDE(c, outer * inner) {
        if (only && !only[c]) continue;
        const index_t o = c / inner, i = c - o * inner;
        A g = tr::load(go.at(o, length - 1, i));
        for (index_t t = length - 1;; --t) {
            gx.at(o, t, i) = tr::store(g);
            const A previous = t > 0 ? tr::load(h.at(o, t - 1, i)) : h0.at(o, i);
            ga.at(o, t, i) = tr::store(conj(previous) * g);
            if (t == 0) break;
            g = conj(tr::load(a.at(o, t, i))) * g + tr::load(go.at(o, t - 1, i));
        }
        if (gh0_ptr) gh0_ptr[o * gh0_so + i * gh0_si] = tr::store(conj(tr::load(a.at(o, 0, i))) * g);
    }
}

// linear_recurrence_bwd_reduce: phase 1 in reverse time. One thread owns one
// (channel, chunk) pair and reduces the map from g[end] (the gradient just after
// the chunk) to g[start]: P = prod conj(a[t+1]) and R = g[start] from a zero
// g[end]. The last chunk has no g[T]: its P is never used and R starts at go[T-1].
template <typename S>
__global__ void linear_recurrence_bwd_reduce(
    const S* go_ptr, const S* a_ptr, typename traits<S>::acc* products,
    typename traits<S>::acc* reduced,
    index_t outer, index_t length, index_t inner, index_t chunk, index_t chunks,
    index_t go_so, index_t go_st, index_t go_si, index_t a_so, index_t a_st, index_t a_si) {
    typedef traits<S> tr;
    typedef typename tr::acc A;
    const view<const S> go = {go_ptr, go_so, go_st, go_si};
    const view<const S> a = {a_ptr, a_so, a_st, a_si};
    CUSCAN_GRID_STRIDE(w, outer * inner * chunks) {
        const index_t c = w % (outer * inner), k = w / (outer * inner);
        const index_t o = c / inner, i = c - o * inner;
        const index_t start = k * chunk, end = min(length, start + chunk);
        A p, g;
        if (end < length) {
            p = conj(tr::load(a.at(o, end, i)));
            g = p * zero<A>() + tr::load(go.at(o, end - 1, i));
        } else {
            p = zero<A>();
            g = tr::load(go.at(o, end - 1, i));
        }
        for (index_t t = end - 2; t >= start; --t) {
            const A at = conj(tr::load(a.at(o, t + 1, i)));
            p = p * at;
            g = at * g + tr::load(go.at(o, t, i));
        }
        const index_t slot = (o * chunks + k) * inner + i;
        products[slot] = p;
        reduced[slot] = g;
    }
}

// linear_recurrence_bwd_rescan: phase 3 in reverse time. One thread owns one
// (channel, chunk) pair, starts from g[end] = starts[o, k + 1, i] (the gradient
// at the start of the next chunk; none for the last chunk), and writes g and ga
// for its chunk, and gh0 from chunk 0. `starts` is contiguous
// (outer, chunks, inner) of type A.
template <typename S>
__global__ void linear_recurrence_bwd_rescan(
    const S* go_ptr, const S* a_ptr, const S* h_ptr, const S* h0_ptr,
    const typename traits<S>::acc* starts, S* ga_ptr, S* gx_ptr, S* gh0_ptr,
    index_t outer, index_t length, index_t inner, index_t chunk, index_t chunks,
    index_t go_so, index_t go_st, index_t go_si, index_t a_so, index_t a_st, index_t a_si,
    index_t h_so, index_t h_st, index_t h_si, index_t h0_so, index_t h0_si,
    index_t ga_so, index_t ga_st, index_t ga_si, index_t gx_so, index_t gx_st, index_t gx_si,
    index_t gh0_so, index_t gh0_si) {
    typedef traits<S> tr;
    typedef typename tr::acc A;
    const view<const S> go = {go_ptr, go_so, go_st, go_si};
    const view<const S> a = {a_ptr, a_so, a_st, a_si};
    const view<const S> h = {h_ptr, h_so, h_st, h_si};
    const view<S> ga = {ga_ptr, ga_so, ga_st, ga_si};
    const view<S> gx = {gx_ptr, gx_so, gx_st, gx_si};
    const state<S> h0 = {h0_ptr, h0_so, h0_si};
    CUSCAN_GRID_STRIDE(w, outer * inner * chunks) {
        const index_t c = w % (outer * inner), k = w / (outer * inner);
        const index_t o = c / inner, i = c - o * inner;
        const index_t start = k * chunk, end = min(length, start + chunk);
        A g = tr::load(go.at(o, end - 1, i));
        if (end < length) {
            g = conj(tr::load(a.at(o, end, i))) * starts[(o * chunks + k + 1) * inner + i] + g;
        }
        for (index_t t = end - 1;; --t) {
            gx.at(o, t, i) = tr::store(g);
            const A previous = t > 0 ? tr::load(h.at(o, t - 1, i)) : h0.at(o, i);
            ga.at(o, t, i) = tr::store(conj(previous) * g);
            if (t == start) break;
            g = conj(tr::load(a.at(o, t, i))) * g + tr::load(go.at(o, t - 1, i));
        }
        if (k == 0 && gh0_ptr) {
            gh0_ptr[o * gh0_so + i * gh0_si] = tr::store(conj(tr::load(a.at(o, 0, i))) * g);
        }
    }
}

}  // namespace cuscan
