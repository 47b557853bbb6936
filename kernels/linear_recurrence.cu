// cuscan: first-order linear recurrences h[t] = a[t] * h[t-1] + x[t] on the GPU.
//
// Compiled at run time by NVRTC (cupy.RawModule), one instantiation per storage
// type S, named through name_expressions. The source includes no header, so it
// compiles with NVRTC alone.
//
// Layout. A problem is T steps times `count` channels; the channels are the
// axes other than time, merged by the host into at most four dimensions
// n0 x n1 x n2 x n3 (n3 fastest), c = ((c0 * n1 + c1) * n2 + c2) * n3 + c3.
// Every operand has its own time stride and four channel strides, in elements
// (64-bit, signed: broadcast operands have stride 0, reversed views a negative
// time stride), so broadcast and reversed operands are read in place and both
// time-contiguous and channel-contiguous layouts need no copy. Consecutive
// threads take consecutive channels, which read coalesced when the channels are
// contiguous in memory. The initial state is an operand without time stride; a
// null pointer means zero. The chunked kernels' work items are (channel,
// chunk) pairs, ordered as the layout reads best (see `owner`); their per-chunk
// work arrays are contiguous in that same order, so item w's slot is w.
//
// Arithmetic. Values are loaded into the accumulator type A (float for the half
// types), combined there, and rounded once on store. The combine step of the
// scan is (a1, x1) . (a2, x2) = (a1 * a2, a2 * x1 + x2): P and R below. The
// chunked kernels' chunk level is in the carry type W: the decay over a chunk,
// P, is a product in W, and the work arrays (P, R and the carries, scanned by
// the kernels of storage type W) hold W. A carry is rounded to A once, as it
// enters its chunk. W is double precision for float and complex<float>: P
// rounded to single precision would repeat its rounding in every later carry
// instead of averaging out, and over 10^6 steps of decays of modulus 1 that
// drifted the result by 10^-2 of its RMS. For the half types W is float: the
// decays nearest 1 they hold forget a state within 2^11 steps, over which that
// drift stays far below their own rounding.

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

// Storage type -> accumulator and carry types, loads, stores, zero, conjugate,
// finiteness, conversions.
template <typename S>
struct traits;

template <>
struct traits<float> {
    typedef float acc;
    typedef double carry;
    static __device__ __forceinline__ float load(float v) { return v; }
    static __device__ __forceinline__ float store(float v) { return v; }
};

template <>
struct traits<double> {
    typedef double acc;
    typedef double carry;
    static __device__ __forceinline__ double load(double v) { return v; }
    static __device__ __forceinline__ double store(double v) { return v; }
};

template <>
struct traits<half> {
    typedef float acc;
    typedef float carry;
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
    typedef float carry;
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
    typedef complex<double> carry;
    static __device__ __forceinline__ complex<T> load(complex<T> v) { return v; }
    static __device__ __forceinline__ complex<T> store(complex<T> v) { return v; }
};

template <typename A>
__device__ __forceinline__ A zero() { return A(0); }
template <>
__device__ __forceinline__ complex<float> zero<complex<float> >() { return {0.0f, 0.0f}; }
template <>
__device__ __forceinline__ complex<double> zero<complex<double> >() { return {0.0, 0.0}; }

// A value of one arithmetic type (A or W) as another, rounded to nearest.
template <typename To>
struct convert {
    template <typename From>
    static __device__ __forceinline__ To from(From v) { return static_cast<To>(v); }
};
template <typename T>
struct convert<complex<T> > {
    template <typename U>
    static __device__ __forceinline__ complex<T> from(complex<U> v) {
        return {static_cast<T>(v.re), static_cast<T>(v.im)};
    }
};

template <typename A>
__device__ __forceinline__ A conj(A v) { return v; }
template <typename T>
__device__ __forceinline__ complex<T> conj(complex<T> v) { return {v.re, -v.im}; }

template <typename A>
__device__ __forceinline__ bool finite(A v) { return isfinite(v); }
template <typename T>
__device__ __forceinline__ bool finite(complex<T> v) { return isfinite(v.re) && isfinite(v.im); }

// The channel dimensions of a problem.
struct channels {
    index_t n0, n1, n2, n3;
    __device__ __forceinline__ index_t count() const { return n0 * n1 * n2 * n3; }
};

// Where one channel starts in an operand with strides (s0, s1, s2, s3).
struct strides {
    index_t time, s0, s1, s2, s3;
    __device__ __forceinline__ index_t offset(const channels& n, index_t c) const {
        const index_t c3 = c % n.n3;
        c /= n.n3;
        const index_t c2 = c % n.n2;
        c /= n.n2;
        const index_t c1 = c % n.n1;
        return (c / n.n1) * s0 + c1 * s1 + c2 * s2 + c3 * s3;
    }
};

// One channel of an operand: element t is data[t * time].
template <typename S>
struct lane {
    S* data;
    index_t time;
    __device__ __forceinline__ S& operator[](index_t t) const { return data[t * time]; }
};

template <typename S>
__device__ __forceinline__ lane<S> channel(S* data, const strides& st, const channels& n,
                                            index_t c) {
    return {data + st.offset(n, c), st.time};
}

// The initial state of a channel, in the accumulator type; zero when absent.
template <typename S>
__device__ __forceinline__ typename traits<S>::acc initial(const S* data, const strides& st,
                                                           const channels& n, index_t c) {
    typedef typename traits<S>::acc A;
    return data ? traits<S>::load(data[st.offset(n, c)]) : zero<A>();
}

// Kernel parameters: the channel sizes, and an operand's time and channel strides.
#define CUSCAN_CHANNELS index_t n0, index_t n1, index_t n2, index_t n3
#define CUSCAN_STRIDES(x) \
    index_t x##_t, index_t x##_s0, index_t x##_s1, index_t x##_s2, index_t x##_s3
#define CUSCAN_MAKE_CHANNELS() const channels n = {n0, n1, n2, n3}
#define CUSCAN_MAKE_STRIDES(x) const strides x##_st = {x##_t, x##_s0, x##_s1, x##_s2, x##_s3}

// The (channel c, chunk k) pair that work item w of count * chunks owns, and
// `next`, the slot distance from chunk k to chunk k + 1 of the same channel.
// Channel-major (chunk_major == 0): consecutive items take consecutive
// channels, slot w = k * count + c; for layouts whose channels are contiguous.
// Chunk-major: consecutive items take consecutive chunks of one channel, slot
// w = c * chunks + k; for layouts whose time steps are contiguous, so that a
// warp works through one span of memory instead of 32 rows far apart.
struct pair {
    index_t c, k, next;
};

__device__ __forceinline__ pair owner(index_t w, index_t count, index_t chunks,
                                      index_t chunk_major) {
    if (chunk_major) return {w / chunks, w % chunks, 1};
    return {w % count, w / count, count};
}

#define CUSCAN_GRID_STRIDE(w, total)                                                 \
    for (index_t w = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x; \
         w < (total); w += static_cast<index_t>(gridDim.x) * blockDim.x)

// Steps per batch of the serial loops below. A batch's loads are all issued
// before its first store: the compiler must assume a store may alias a later
// load and would otherwise keep one step's loads in flight per thread, far too
// few to cover memory latency.
template <typename S>
struct batch {
    static constexpr int size = sizeof(typename traits<S>::acc) > 8 ? 4 : 8;
};

// The serial recurrence over steps [begin, end) of one channel from state h:
// h = a[t] * h + x[t], stored at every step. Returns the last state.
template <typename S>
__device__ __forceinline__ typename traits<S>::acc forward_steps(
    lane<const S> a, lane<const S> x, lane<S> out, typename traits<S>::acc h, index_t begin,
    index_t end) {
    typedef traits<S> tr;
    constexpr int U = batch<S>::size;
    index_t t = begin;
    for (; t + U <= end; t += U) {
        S as[U], xs[U];
#pragma unroll
        for (int i = 0; i < U; ++i) {
            as[i] = a[t + i];
            xs[i] = x[t + i];
        }
#pragma unroll
        for (int i = 0; i < U; ++i) {
            h = tr::load(as[i]) * h + tr::load(xs[i]);
            out[t + i] = tr::store(h);
        }
    }
    for (; t < end; ++t) {
        h = tr::load(a[t]) * h + tr::load(x[t]);
        out[t] = tr::store(h);
    }
    return h;
}

// The gradient over steps [start, last] of one channel, backwards from g = g[last]:
// stores g[t] and ga[t] = conj(h[t-1]) * g[t] (h[-1] = first), then steps
// g[t-1] = go[t-1] + conj(a[t]) * g[t]. Returns g[start]. Batched as
// forward_steps: a batch of U steps t, ..., t-U+1 loads h[t-1-i], a[t-i] and
// go[t-1-i] first, all at indices >= start >= 0 since t - U >= start.
template <typename S>
__device__ __forceinline__ typename traits<S>::acc backward_steps(
    lane<const S> go, lane<const S> a, lane<const S> h, typename traits<S>::acc first,
    lane<S> ga, lane<S> gx, typename traits<S>::acc g, index_t start, index_t last) {
    typedef traits<S> tr;
    constexpr int U = batch<S>::size;
    index_t t = last;
    for (; t - U >= start; t -= U) {
        S hs[U], as[U], gos[U];
#pragma unroll
        for (int i = 0; i < U; ++i) {
            hs[i] = h[t - 1 - i];
            as[i] = a[t - i];
            gos[i] = go[t - 1 - i];
        }
#pragma unroll
        for (int i = 0; i < U; ++i) {
            gx[t - i] = tr::store(g);
            ga[t - i] = tr::store(conj(tr::load(hs[i])) * g);
            g = conj(tr::load(as[i])) * g + tr::load(gos[i]);
        }
    }
    for (;; --t) {
        gx[t] = tr::store(g);
        ga[t] = tr::store(conj(t > 0 ? tr::load(h[t - 1]) : first) * g);
        if (t == start) return g;
        g = conj(tr::load(a[t])) * g + tr::load(go[t - 1]);
    }
}

// ---- forward ----------------------------------------------------------------

// linear_recurrence_fwd_serial: the paper's serial baseline. One thread owns one
// channel and steps through all T elements: h = a[t] * h + x[t], h[-1] = h0.
// With `only` non-null, a thread runs only if only[c] is non-zero: this re-runs
// the channels whose chunked result cannot be trusted (see nonfinite_channels).
template <typename S>
__global__ void linear_recurrence_fwd_serial(
    const S* a_ptr, const S* x_ptr, const S* h0_ptr, S* out_ptr, const int* only,
    index_t length, CUSCAN_CHANNELS,
    CUSCAN_STRIDES(a), CUSCAN_STRIDES(x), CUSCAN_STRIDES(h0), CUSCAN_STRIDES(out)) {
    CUSCAN_MAKE_CHANNELS();
    CUSCAN_MAKE_STRIDES(a);
    CUSCAN_MAKE_STRIDES(x);
    CUSCAN_MAKE_STRIDES(h0);
    CUSCAN_MAKE_STRIDES(out);
    CUSCAN_GRID_STRIDE(c, n.count()) {
        if (only && !only[c]) continue;
        const lane<const S> a = channel(a_ptr, a_st, n, c), x = channel(x_ptr, x_st, n, c);
        forward_steps(a, x, channel(out_ptr, out_st, n, c), initial(h0_ptr, h0_st, n, c), 0,
                      length);
    }
}

// linear_recurrence_fwd_reduce: phase 1 of Algorithm 1 (Martin & Cundy 2018).
// Time is cut into `chunks` chunks of `chunk` steps (the last may be shorter).
// One thread owns one (channel, chunk) pair and reduces it to P, the product of
// its decays (in the carry type W), and R, its final state from a zero start
// (in A), both written to slot w of the work arrays in W. Sets flags[c] when P
// or R is not finite (see "Untrusted channels").
template <typename S>
__global__ void linear_recurrence_fwd_reduce(
    const S* a_ptr, const S* x_ptr, typename traits<S>::carry* products,
    typename traits<S>::carry* reduced, int* flags, index_t length, index_t chunk,
    index_t chunks, index_t chunk_major, CUSCAN_CHANNELS, CUSCAN_STRIDES(a), CUSCAN_STRIDES(x)) {
    typedef traits<S> tr;
    typedef typename tr::acc A;
    typedef typename tr::carry W;
    CUSCAN_MAKE_CHANNELS();
    CUSCAN_MAKE_STRIDES(a);
    CUSCAN_MAKE_STRIDES(x);
    const index_t count = n.count();
    CUSCAN_GRID_STRIDE(w, count * chunks) {
        const auto [c, k, next] = owner(w, count, chunks, chunk_major);
        const lane<const S> a = channel(a_ptr, a_st, n, c), x = channel(x_ptr, x_st, n, c);
        const index_t start = k * chunk, end = min(length, start + chunk);
        const A first = tr::load(a[start]);
        W p = convert<W>::from(first);
        A r = first * zero<A>() + tr::load(x[start]);
        for (index_t t = start + 1; t < end; ++t) {
            const A at = tr::load(a[t]);
            p = p * convert<W>::from(at);
            r = at * r + tr::load(x[t]);
        }
        products[w] = p;
        reduced[w] = convert<W>::from(r);
        if (!(finite(p) && finite(r))) flags[c] = 1;
    }
}

// linear_recurrence_fwd_rescan: phase 3 of Algorithm 1. One thread owns one
// (channel, chunk) pair and re-runs the serial recurrence over it from its
// carry: the initial state for chunk 0, else carries[k - 1], the state at the
// end of the previous chunk, rounded to A. Sets flags[c] when the chunk's last
// state is not finite (see "Untrusted channels").
template <typename S>
__global__ void linear_recurrence_fwd_rescan(
    const S* a_ptr, const S* x_ptr, const S* h0_ptr, const typename traits<S>::carry* carries,
    S* out_ptr, int* flags, index_t length, index_t chunk, index_t chunks, index_t chunk_major,
    CUSCAN_CHANNELS,
    CUSCAN_STRIDES(a), CUSCAN_STRIDES(x), CUSCAN_STRIDES(h0), CUSCAN_STRIDES(out)) {
    typedef typename traits<S>::acc A;
    CUSCAN_MAKE_CHANNELS();
    CUSCAN_MAKE_STRIDES(a);
    CUSCAN_MAKE_STRIDES(x);
    CUSCAN_MAKE_STRIDES(h0);
    CUSCAN_MAKE_STRIDES(out);
    const index_t count = n.count();
    CUSCAN_GRID_STRIDE(w, count * chunks) {
        const auto [c, k, next] = owner(w, count, chunks, chunk_major);
        const lane<const S> a = channel(a_ptr, a_st, n, c), x = channel(x_ptr, x_st, n, c);
        const A h = k == 0 ? initial(h0_ptr, h0_st, n, c) : convert<A>::from(carries[w - next]);
        const A last = forward_steps(a, x, channel(out_ptr, out_st, n, c), h, k * chunk,
                                     min(length, (k + 1) * chunk));
        if (!finite(last)) flags[c] = 1;
    }
}

// Untrusted channels. P * carry + R equals the serial result only while all three
// are finite (an overflowing product times a zero state is NaN, the serial
// loop's 0), and a carry in W can stay finite where the serial loop's state in A
// overflowed inside a chunk. In the serial loop a state that is not finite stays
// so (infinity times a decay is infinite or NaN). The chunked kernels therefore
// set flags[c] (zeroed by the host) when any product or reduction of channel c,
// or the last state of any of its rescanned chunks, is not finite; that covers
// a carry that is not finite once rounded to A. The serial kernel then re-runs
// those channels, so NaN and infinity propagate exactly as in the serial loop.
// Every writer stores the same 1, so the writes need no order.

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
    const S* go_ptr, const S* a_ptr, const S* h_ptr, const S* h0_ptr, S* ga_ptr, S* gx_ptr,
    S* gh0_ptr, const int* only, index_t length, CUSCAN_CHANNELS,
    CUSCAN_STRIDES(go), CUSCAN_STRIDES(a), CUSCAN_STRIDES(h), CUSCAN_STRIDES(h0),
    CUSCAN_STRIDES(ga), CUSCAN_STRIDES(gx), CUSCAN_STRIDES(gh0)) {
    typedef traits<S> tr;
    typedef typename tr::acc A;
    CUSCAN_MAKE_CHANNELS();
    CUSCAN_MAKE_STRIDES(go);
    CUSCAN_MAKE_STRIDES(a);
    CUSCAN_MAKE_STRIDES(h);
    CUSCAN_MAKE_STRIDES(h0);
    CUSCAN_MAKE_STRIDES(ga);
    CUSCAN_MAKE_STRIDES(gx);
    CUSCAN_MAKE_STRIDES(gh0);
    CUSCAN_GRID_STRIDE(c, n.count()) {
        if (only && !only[c]) continue;
        const lane<const S> go = channel(go_ptr, go_st, n, c), a = channel(a_ptr, a_st, n, c);
        const lane<const S> h = channel(h_ptr, h_st, n, c);
        const lane<S> ga = channel(ga_ptr, ga_st, n, c), gx = channel(gx_ptr, gx_st, n, c);
        const A g = backward_steps(go, a, h, initial(h0_ptr, h0_st, n, c), ga, gx,
                                   tr::load(go[length - 1]), 0, length - 1);
        if (gh0_ptr) gh0_ptr[gh0_st.offset(n, c)] = tr::store(conj(tr::load(a[0])) * g);
    }
}

// linear_recurrence_bwd_reduce: phase 1 in reverse time. One thread owns one
// (channel, chunk) pair and reduces the map from g[end] (the gradient just after
// the chunk) to g[start]: P = prod conj(a[t+1]) (in W) and R = g[start] from a
// zero g[end] (in A), written in W as the forward reduction's. The last chunk
// has no g[T]: its P is zero and R starts at go[T-1].
template <typename S>
__global__ void linear_recurrence_bwd_reduce(
    const S* go_ptr, const S* a_ptr, typename traits<S>::carry* products,
    typename traits<S>::carry* reduced, int* flags, index_t length, index_t chunk,
    index_t chunks, index_t chunk_major, CUSCAN_CHANNELS, CUSCAN_STRIDES(go), CUSCAN_STRIDES(a)) {
    typedef traits<S> tr;
    typedef typename tr::acc A;
    typedef typename tr::carry W;
    CUSCAN_MAKE_CHANNELS();
    CUSCAN_MAKE_STRIDES(go);
    CUSCAN_MAKE_STRIDES(a);
    const index_t count = n.count();
    CUSCAN_GRID_STRIDE(w, count * chunks) {
        const auto [c, k, next] = owner(w, count, chunks, chunk_major);
        const lane<const S> go = channel(go_ptr, go_st, n, c), a = channel(a_ptr, a_st, n, c);
        const index_t start = k * chunk, end = min(length, start + chunk);
        W p;
        A g;
        if (end < length) {
            const A after = conj(tr::load(a[end]));
            p = convert<W>::from(after);
            g = after * zero<A>() + tr::load(go[end - 1]);
        } else {
            p = zero<W>();
            g = tr::load(go[end - 1]);
        }
        for (index_t t = end - 2; t >= start; --t) {
            const A at = conj(tr::load(a[t + 1]));
            p = p * convert<W>::from(at);
            g = at * g + tr::load(go[t]);
        }
        products[w] = p;
        reduced[w] = convert<W>::from(g);
        if (!(finite(p) && finite(g))) flags[c] = 1;
    }
}

// linear_recurrence_bwd_rescan: phase 3 in reverse time. One thread owns one
// (channel, chunk) pair, starts from g[end] = starts[k + 1] (the gradient at the
// start of the next chunk, rounded to A; none for the last chunk), and writes g
// and ga for its chunk, and gh0 from chunk 0. Sets flags[c] when g[start], the
// chunk's last gradient, is not finite.
template <typename S>
__global__ void linear_recurrence_bwd_rescan(
    const S* go_ptr, const S* a_ptr, const S* h_ptr, const S* h0_ptr,
    const typename traits<S>::carry* starts, S* ga_ptr, S* gx_ptr, S* gh0_ptr, int* flags,
    index_t length, index_t chunk, index_t chunks, index_t chunk_major, CUSCAN_CHANNELS,
    CUSCAN_STRIDES(go), CUSCAN_STRIDES(a), CUSCAN_STRIDES(h), CUSCAN_STRIDES(h0),
    CUSCAN_STRIDES(ga), CUSCAN_STRIDES(gx), CUSCAN_STRIDES(gh0)) {
    typedef traits<S> tr;
    typedef typename tr::acc A;
    CUSCAN_MAKE_CHANNELS();
    CUSCAN_MAKE_STRIDES(go);
    CUSCAN_MAKE_STRIDES(a);
    CUSCAN_MAKE_STRIDES(h);
    CUSCAN_MAKE_STRIDES(h0);
    CUSCAN_MAKE_STRIDES(ga);
    CUSCAN_MAKE_STRIDES(gx);
    CUSCAN_MAKE_STRIDES(gh0);
    const index_t count = n.count();
    CUSCAN_GRID_STRIDE(w, count * chunks) {
        const auto [c, k, next] = owner(w, count, chunks, chunk_major);
        const lane<const S> go = channel(go_ptr, go_st, n, c), a = channel(a_ptr, a_st, n, c);
        const lane<const S> h = channel(h_ptr, h_st, n, c);
        const lane<S> ga = channel(ga_ptr, ga_st, n, c), gx = channel(gx_ptr, gx_st, n, c);
        const index_t start = k * chunk, end = min(length, start + chunk);
        A g = tr::load(go[end - 1]);
        if (end < length) {
            const A after = convert<A>::from(starts[w + next]);  // g[end]
            g = conj(tr::load(a[end])) * after + g;
        }
        const A first = k == 0 ? initial(h0_ptr, h0_st, n, c) : zero<A>();  // read at t = 0 only
        g = backward_steps(go, a, h, first, ga, gx, g, start, end - 1);
        if (!finite(g)) flags[c] = 1;
        if (k == 0 && gh0_ptr) gh0_ptr[gh0_st.offset(n, c)] = tr::store(conj(tr::load(a[0])) * g);
    }
}

}  // namespace cuscan
