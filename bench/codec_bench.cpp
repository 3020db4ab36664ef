// Micro-benchmark of the CBLO codec: the prefix varint of tlptm/codec.hpp against the
// byte-by-byte LEB128 loop (the paper's compressor), encode and decode, per value.
//
// Each benchmark works on 4096 values of one distribution; items_per_second is values per
// second, the counter ns_per_value is its inverse, and bytes_per_value is the mean encoded
// size. Decoding is a dependent chain (the next value starts where the previous one ended),
// as when recovery walks a log entry.

#include <tlptm/codec.hpp>

#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace {

using namespace tlptm::codec;

constexpr std::size_t values_per_batch = 4096;

enum class distribution { small, mixed_width, pool_offset, full64 };

// Values of one distribution, always the same (fixed seed per distribution).
std::vector<std::uint64_t> make_values(distribution d) {
    std::mt19937_64 rng(0xC0DEC0DE + static_cast<unsigned>(d));
    std::uniform_int_distribution<int> width(0, 64);
    std::vector<std::uint64_t> v(values_per_batch);
    for (auto& x : v) {
        switch (d) {
        case distribution::small: // < 128: masks of -1 after zigzag, small counters
            x = rng() & 0x7F;
            break;
        case distribution::mixed_width: { // bit width uniform in 0..64
            const int w = width(rng);
            x = w == 0 ? 0 : (rng() >> (64 - w)) | (std::uint64_t{1} << (w - 1));
            break;
        }
        case distribution::pool_offset: // < 2^30: offsets in a 1 GiB pool
            x = rng() & ((std::uint64_t{1} << 30) - 1);
            break;
        case distribution::full64: // random 64-bit words: pointers, hashes
            x = rng();
            break;
        }
    }
    return v;
}

// The codec under test, as a pair of functions plus the room one value may take.
struct fast_codec {
    static constexpr std::size_t room = put_varint_writable_bytes;
    static std::size_t put(std::uint8_t* dst, std::uint64_t v) noexcept {
        return put_varint(dst, v);
    }
    static std::size_t get(const std::uint8_t* src, const std::uint8_t* end,
                           std::uint64_t& out) noexcept {
        return get_varint(src, end, out);
    }
};

struct leb128_codec {
    static constexpr std::size_t room = reference::max_leb128_bytes;
    static std::size_t put(std::uint8_t* dst, std::uint64_t v) noexcept {
        return reference::put_leb128(dst, v);
    }
    static std::size_t get(const std::uint8_t* src, const std::uint8_t* end,
                           std::uint64_t& out) noexcept {
        return reference::get_leb128(src, end, out);
    }
};

void set_counters(benchmark::State& state, std::size_t encoded_bytes) {
    state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) *
                            static_cast<std::int64_t>(values_per_batch));
    state.counters["bytes_per_value"] = static_cast<double>(encoded_bytes) / values_per_batch;
    // Seconds per value, printed with an SI prefix ("2.1n" = 2.1 ns per value).
    state.counters["ns_per_value"] = benchmark::Counter(
        static_cast<double>(values_per_batch),
        benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

template <class Codec, distribution D> void bm_encode(benchmark::State& state) {
    const std::vector<std::uint64_t> values = make_values(D);
    // Every encoding fits in `room` bytes and no put writes more than `room` from its start.
    std::vector<std::uint8_t> buf(values.size() * Codec::room);
    std::size_t len = 0;
    for (auto _ : state) {
        len = 0;
        for (const std::uint64_t v : values) {
            len += Codec::put(buf.data() + len, v);
        }
        // The stores must happen: the buffer escapes and memory is clobbered every batch.
        benchmark::DoNotOptimize(buf.data());
        benchmark::DoNotOptimize(len);
        benchmark::ClobberMemory();
    }
    set_counters(state, len);
}

template <class Codec, distribution D> void bm_decode(benchmark::State& state) {
    const std::vector<std::uint64_t> values = make_values(D);
    std::vector<std::uint8_t> buf(values.size() * Codec::room);
    std::size_t len = 0;
    for (const std::uint64_t v : values) {
        len += Codec::put(buf.data() + len, v);
    }
    std::uint64_t expected_sum = 0;
    for (const std::uint64_t v : values) {
        expected_sum += v;
    }
    const std::uint8_t* const end = buf.data() + len;
    for (auto _ : state) {
        // The input may change behind the compiler's back: nothing is hoisted out.
        benchmark::DoNotOptimize(buf.data());
        benchmark::ClobberMemory();
        const std::uint8_t* p = buf.data();
        std::uint64_t sum = 0;
        std::size_t count = 0;
        while (p < end) {
            std::uint64_t v = 0;
            const std::size_t n = Codec::get(p, end, v);
            if (n == 0) [[unlikely]] {
                break;
            }
            sum += v;
            p += n;
            ++count;
        }
        benchmark::DoNotOptimize(sum);
        if (count != values.size() || sum != expected_sum) [[unlikely]] {
            state.SkipWithError("decoded values differ from the encoded ones");
            break;
        }
    }
    set_counters(state, len);
}

#define TLPTM_CODEC_BENCH(dist)                                                                    \
    BENCHMARK(bm_encode<fast_codec, distribution::dist>)->Name("encode/prefix_varint/" #dist);     \
    BENCHMARK(bm_encode<leb128_codec, distribution::dist>)->Name("encode/leb128/" #dist);          \
    BENCHMARK(bm_decode<fast_codec, distribution::dist>)->Name("decode/prefix_varint/" #dist);     \
    BENCHMARK(bm_decode<leb128_codec, distribution::dist>)->Name("decode/leb128/" #dist)

TLPTM_CODEC_BENCH(small);
TLPTM_CODEC_BENCH(mixed_width);
TLPTM_CODEC_BENCH(pool_offset);
TLPTM_CODEC_BENCH(full64);

} // namespace

BENCHMARK_MAIN();
