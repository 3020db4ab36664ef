// Micro-benchmark of the CBLO codec: the prefix varint of tlptm/codec.hpp against the
// byte-by-byte LEB128 loop (the paper's compressor), encode and decode, per value.
//
// Each benchmark works on 4096 values of one distribution; items_per_second is values per
// second, the counter ns_per_value is its inverse, and bytes_per_value is the mean encoded
// size. Decoding is a dependent chain (the next value starts where the previous one ended),
// as when recovery walks a log entry.
//
// entry/encode_run/N encodes a commit's payload the way commit does (entry_builder from the
// write-set's runs): one value of N words stored whole, counters with two-byte codes;
// encode_run_1b, _random64 and _mixed the same with one-byte codes (the workloads' per-key
// counters), nine-byte codes (random words) and codes of every length; and
// entry/encode_scattered/N the same number of single words with gaps between them.

#include <tlptm/codec.hpp>
#include <tlptm/detail/write_set.hpp>
#include <tlptm/log.hpp>

#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
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

// The values of a run of words in entry/encode_run: what their codes look like.
enum class run_values { counters_1b, counters_2b, random64, mixed };

// Encodes one commit's payload from a write-set (its runs, as commit hands them over).
void bm_encode_entry(benchmark::State& state, bool scattered, run_values kind) {
    const auto words = static_cast<std::size_t>(state.range(0));
    tlptm::detail::write_set ws;
    std::vector<std::uint64_t> vals(words);
    std::mt19937_64 rng(0x5EED);
    for (std::size_t k = 0; k < words; ++k) {
        switch (kind) {
        case run_values::counters_1b: // per-key counters (the workloads' values): one byte
            vals[k] = 7 + k % 50;
            break;
        case run_values::counters_2b: // larger counters: two-byte zigzag codes
            vals[k] = 1000 + k;
            break;
        case run_values::random64: // hashes, random values: nine-byte codes mostly
            vals[k] = rng();
            break;
        case run_values::mixed: // every code length
            vals[k] = rng() >> (rng() % 64);
            break;
        }
    }
    const std::uint64_t at = 4096;
    if (scattered) {
        for (std::size_t k = 0; k < words; ++k)
            ws.put(at + 16 * k, vals[k], ~std::uint64_t{0});
    } else {
        std::vector<std::uint8_t> bytes(8 * words);
        std::memcpy(bytes.data(), vals.data(), bytes.size());
        ws.put_words(at, bytes.data(), words);
    }
    ws.sort_for_commit();
    const tlptm::detail::pointer_range ptrs{std::uint64_t{1} << 44, std::uint64_t{1} << 30};
    tlptm::detail::entry_builder b;
    std::size_t bound = 0;
    for (auto _ : state) {
        bound =
            b.encode_words(tlptm::detail::entry_format::compressed, ws.words(), ws.size(), ptrs);
        benchmark::DoNotOptimize(bound);
        benchmark::ClobberMemory();
    }
    state.counters["words"] = static_cast<double>(words);
    state.counters["ns_per_word"] = benchmark::Counter(
        static_cast<double>(words),
        benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
    state.counters["entry_bound_B"] = static_cast<double>(bound);
}
BENCHMARK_CAPTURE(bm_encode_entry, run, false, run_values::counters_2b)
    ->Name("entry/encode_run")
    ->Arg(1)
    ->Arg(4)
    ->Arg(32)
    ->Arg(128);
BENCHMARK_CAPTURE(bm_encode_entry, run_1b, false, run_values::counters_1b)
    ->Name("entry/encode_run_1b")
    ->Arg(4)
    ->Arg(32);
BENCHMARK_CAPTURE(bm_encode_entry, run_random64, false, run_values::random64)
    ->Name("entry/encode_run_random64")
    ->Arg(4)
    ->Arg(32);
BENCHMARK_CAPTURE(bm_encode_entry, run_mixed, false, run_values::mixed)
    ->Name("entry/encode_run_mixed")
    ->Arg(32);
BENCHMARK_CAPTURE(bm_encode_entry, scattered, true, run_values::counters_2b)
    ->Name("entry/encode_scattered")
    ->Arg(1)
    ->Arg(4)
    ->Arg(32)
    ->Arg(128);

TLPTM_CODEC_BENCH(small);
TLPTM_CODEC_BENCH(mixed_width);
TLPTM_CODEC_BENCH(pool_offset);
TLPTM_CODEC_BENCH(full64);

} // namespace

BENCHMARK_MAIN();
