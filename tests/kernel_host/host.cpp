// Compiles kernels/linear_recurrence.cu for the CPU, so the test suite can run
// the real kernels (through the real launch plan) without a GPU.
//
// Every kernel loops over its work with a grid-stride loop and threads never
// communicate, so running the GPU's threads one after another, in any order,
// computes what they compute together. A launch here runs a grid of 3 blocks of
// 5 threads, so that the loop's start and stride are not trivial, in a shuffled
// order (neither increasing nor decreasing): a work item that reads what another
// one writes, which a GPU leaves unordered, can find it not yet written, where
// one thread running the items in order always had it.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>

struct cuscan_host_dim {
    long long x;
};
static thread_local cuscan_host_dim blockIdx = {0}, threadIdx = {0};  // ctypes drops the GIL
static const cuscan_host_dim blockDim = {5}, gridDim = {3};

#define __global__
#define __device__
#define __forceinline__ inline

using std::isfinite;
using std::min;

static inline float __uint_as_float(unsigned int u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

static inline unsigned int __float_as_uint(float f) {
    unsigned int u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}

// IEEE binary16 <-> binary32, round to nearest even (what cvt.rn does on the GPU).
static inline float cuscan_host_half_to_float(unsigned short h) {
    const int exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
    float f;
    if (exponent == 0) {
        f = std::ldexp(static_cast<float>(mantissa), -24);
    } else if (exponent == 31) {
        f = mantissa ? NAN : INFINITY;
    } else {
        f = std::ldexp(static_cast<float>(mantissa | 0x400), exponent - 25);
    }
    return (h & 0x8000) ? -f : f;
}

static inline unsigned short cuscan_host_float_to_half(float f) {
    const unsigned short sign = (__float_as_uint(f) >> 16) & 0x8000;
    const float a = std::fabs(f);
    if (std::isnan(f)) return sign | 0x7e00;
    if (a >= 65520.0f) return sign | 0x7c00;  // rounds past the largest half, 65504
    if (a < 0x1p-14f) {  // subnormal: multiples of 2^-24
        return sign | static_cast<unsigned short>(std::nearbyint(a * 0x1p24f));
    }
    int e;
    const float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
    float q = std::nearbyint(m * 2048.0f);  // 1024..2048: 11 significant bits
    int biased = e - 1 + 15;
    if (q == 2048.0f) {
        q = 1024.0f;
        biased += 1;
    }
    if (biased >= 31) return sign | 0x7c00;
    return sign | static_cast<unsigned short>((biased << 10) | (static_cast<int>(q) - 1024));
}

#include "linear_recurrence.cu"

// Launch entry points taking an array of pointers to the arguments, as
// cuLaunchKernel does.
template <typename... P, std::size_t... I>
static void invoke(void (*kernel)(P...), void** args, std::index_sequence<I...>) {
    kernel(*static_cast<std::remove_reference_t<P>*>(args[I])...);
}

template <typename... P>
static void invoke(void (*kernel)(P...), void** args) {
    const long long threads = gridDim.x * blockDim.x;
    for (long long i = 0; i < threads; ++i) {
        const long long j = i * 7 % threads;  // 7 is prime to 15: each thread once, shuffled
        blockIdx.x = j / blockDim.x;
        threadIdx.x = j % blockDim.x;
        invoke(kernel, args, std::index_sequence_for<P...>{});
    }
}

#define CUSCAN_EXPORT(kernel, tag, type) \
    extern "C" void kernel##_##tag(void** args) { invoke(&cuscan::kernel<type>, args); }

#define CUSCAN_EXPORT_STORAGE(tag, type)                       \
    CUSCAN_EXPORT(linear_recurrence_fwd_serial, tag, type)     \
    CUSCAN_EXPORT(linear_recurrence_fwd_reduce, tag, type)     \
    CUSCAN_EXPORT(linear_recurrence_fwd_rescan, tag, type)     \
    CUSCAN_EXPORT(linear_recurrence_bwd_serial, tag, type)     \
    CUSCAN_EXPORT(linear_recurrence_bwd_reduce, tag, type)     \
    CUSCAN_EXPORT(linear_recurrence_bwd_rescan, tag, type)

CUSCAN_EXPORT_STORAGE(float16, cuscan::half)
CUSCAN_EXPORT_STORAGE(bfloat16, cuscan::bfloat16)
CUSCAN_EXPORT_STORAGE(float32, float)
CUSCAN_EXPORT_STORAGE(float64, double)
CUSCAN_EXPORT_STORAGE(complex64, cuscan::complex<float>)
CUSCAN_EXPORT_STORAGE(complex128, cuscan::complex<double>)
