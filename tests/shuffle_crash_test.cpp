// Crash images of the shuffle store's transactions (examples/shuffle/nv_store.hpp), with the
// harness of tests/harness/ (docs/crash-testing.md): every pool image a power failure may
// leave at every flush and fence, recovered and compared with a reference model, of
// - map tasks written by ONE transaction each (write_task, the default for private buffers):
//   records stored raw into chunks the transaction allocated, then the lists and the complete
//   flag: a crash image holds all of a task's chunks or none of them;
// - a map task's chunk publications (one transaction per chunk, as shared buffers, eager
//   allocation and --chunk-tx do), its commit (the final transaction: last partial chunk +
//   complete flag), the discard of an incomplete task and its rerun. The model's digest holds, per
//   chunk
// list, the chunks and bytes found by walking it, a hash of the chunks' contents (AALO bytes:
// a committed chunk must hold exactly what was copied into it) and the list's counters, and
// per map task its complete flag and record count. The harness also checks that the heap in
// use after recovery is exactly the root, the table and the reachable chunks (no leak).
//
// TLPTM_SWEEP=long sweeps with the long budget of persistency_test.

#include "../examples/shuffle/nv_store.hpp"
#include "harness/scenarios.hpp"
#include "harness/sweep.hpp"
#include "test_util.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

using namespace tlptm_harness;

constexpr std::uint32_t maps = 2, partitions = 2;
constexpr std::size_t chunk_bytes = 256; // 240 bytes of data per chunk
constexpr std::size_t slots_per_list = 5;

shuffle::workload tiny_job() {
    shuffle::workload w;
    w.maps = maps;
    w.partitions = partitions;
    w.input_bytes = 4096;
    return w;
}

shuffle::store_options tiny_store() {
    shuffle::store_options o;
    o.chunk_size = chunk_bytes;
    return o;
}

std::uint64_t fold(std::uint64_t h, std::uint64_t x) {
    return shuffle::mix64(h ^ x);
}

/// Digest: per list (m * partitions + p) [walked chunks, walked bytes, content hash, counter
/// chunks, counter bytes]; then per map task [complete, records].
std::size_t at_list(std::uint32_t m, std::uint32_t p) {
    return (std::size_t{m} * partitions + p) * slots_per_list;
}
std::size_t at_map(std::uint32_t m) {
    return std::size_t{maps} * partitions * slots_per_list + 2 * std::size_t{m};
}

observation observe_shuffle(tlptm::pool& p) {
    observation o;
    o.state.assign(at_map(maps), 0);
    o.reachable_bytes = root_bytes(p);
    auto* rt = p.root<shuffle::shuffle_root>();
    std::uint8_t* table = rt->tables[0].get();
    if (table == nullptr) {
        o.problem = "no mapping table";
        return o;
    }
    std::string why;
    std::uint64_t tsize = allocated_block(p, table, why);
    if (tsize == 0) {
        o.problem = "table: " + why;
        return o;
    }
    o.reachable_bytes += tsize;
    const auto* entries = reinterpret_cast<const shuffle::map_entry*>(table + 64);
    const auto* lists = reinterpret_cast<const shuffle::chunk_list*>(
        table + 64 + sizeof(shuffle::map_entry) * maps);
    for (std::uint32_t m = 0; m < maps; ++m)
        for (std::uint32_t q = 0; q < partitions; ++q) {
            const shuffle::chunk_list& l = lists[m * partitions + q];
            std::size_t at = at_list(m, q);
            std::uint64_t n = 0, bytes = 0, h = 0;
            for (shuffle::chunk* c = l.head.get(); c != nullptr; c = c->next.get()) {
                std::uint64_t size = allocated_block(p, c, why);
                if (size != chunk_bytes) {
                    o.problem = "list " + std::to_string(at) + " chunk " + std::to_string(n) +
                                ": " + (size ? "wrong block size" : why);
                    return o;
                }
                if (++n > 64) {
                    o.problem = "a list longer than 64 chunks (a cycle?)";
                    return o;
                }
                std::uint64_t used = c->used.get();
                if (used > chunk_bytes - shuffle::chunk_header_bytes) {
                    o.problem = "a chunk claims " + std::to_string(used) + " bytes";
                    return o;
                }
                o.reachable_bytes += size;
                bytes += used;
                h = fold(h, shuffle::hash_bytes(shuffle::chunk_data(c), used));
            }
            o.state[at] = n;
            o.state[at + 1] = bytes;
            o.state[at + 2] = h;
            o.state[at + 3] = l.chunks.get();
            o.state[at + 4] = l.bytes.get();
        }
    for (std::uint32_t m = 0; m < maps; ++m) {
        o.state[at_map(m)] = entries[m].complete.get();
        o.state[at_map(m) + 1] = entries[m].records.get();
    }
    return o;
}

/// The model of publishing one chunk of `data` at the tail of list (m, p).
model_op publish_op(std::uint32_t m, std::uint32_t p, const std::vector<std::uint8_t>& data) {
    std::uint64_t h = shuffle::hash_bytes(data.data(), data.size());
    std::uint64_t n = data.size();
    return [=](digest& d) {
        std::size_t at = at_list(m, p);
        d[at] += 1;
        d[at + 1] += n;
        d[at + 2] = fold(d[at + 2], h);
        d[at + 3] += 1;
        d[at + 4] += n;
    };
}

/// The model of write_task(m): the task's records, per partition, packed as write_task packs
/// them (whole records, chunk_capacity bytes at most per chunk), and its complete flag.
model_op task_op(std::uint32_t m, std::size_t cap) {
    std::vector<std::vector<std::vector<std::uint8_t>>> chunks(partitions);
    shuffle::map_summary sum = shuffle::run_map(
        tiny_job(), m, [&](std::uint32_t q, const std::uint8_t* rec, std::size_t n) {
            auto& l = chunks[q];
            if (l.empty() || l.back().size() + n > cap)
                l.emplace_back();
            l.back().insert(l.back().end(), rec, rec + n);
        });
    return [chunks, sum, m](digest& d) {
        for (std::uint32_t q = 0; q < partitions; ++q) {
            std::size_t at = at_list(m, q);
            for (const auto& c : chunks[q]) {
                d[at] += 1;
                d[at + 1] += c.size();
                d[at + 2] = fold(d[at + 2], shuffle::hash_bytes(c.data(), c.size()));
                d[at + 3] += 1;
                d[at + 4] += c.size();
            }
        }
        d[at_map(m)] = 1;
        d[at_map(m) + 1] = sum.records;
    };
}

std::vector<std::uint8_t> bytes_of(std::uint64_t tag, std::size_t n) {
    std::vector<std::uint8_t> v(n);
    for (std::size_t i = 0; i < n; ++i)
        v[i] = static_cast<std::uint8_t>(shuffle::mix64(tag * 1000 + i));
    return v;
}

/// A shuffle scenario's common part: a tiny pool holding the store's root and mapping table,
/// observed through the store. The caller adds the run.
scenario shuffle_scenario(const char* name, tlptm::log_mode mode) {
    scenario s;
    s.name = scenarios::named(name, mode);
    s.options = scenarios::tiny_pool(mode);
    s.setup = [](tlptm::pool& p) {
        p.root<shuffle::shuffle_root>();
        shuffle::nv_store store(p, 0, tiny_job(), tiny_store());
    };
    s.observe = observe_shuffle;
    return s;
}

/// Map task 0 publishes three chunks and commits (a last partial chunk with its complete
/// flag); map task 1 publishes two chunks and "crashes"; the restart discards task 1 (one
/// transaction per list) and reruns it to completion.
scenario shuffle_commit(tlptm::log_mode mode) {
    scenario s = shuffle_scenario("shuffle-map-commit", mode);
    s.run = [](tlptm::pool& p, recorder& rec) {
        shuffle::nv_store store(p, 0, tiny_job(), tiny_store());
        const std::size_t cap = store.chunk_capacity();
        auto publish = [&](std::uint32_t m, std::uint32_t q, std::uint64_t tag, std::size_t n) {
            std::vector<std::uint8_t> data = bytes_of(tag, n);
            rec.atomic(
                p, [&] { store.publish(m, q, data.data(), data.size()); }, publish_op(m, q, data));
        };
        auto commit = [&](std::uint32_t m, std::uint32_t q, std::uint64_t tag, std::size_t n,
                          std::uint64_t records) {
            std::vector<std::uint8_t> data = bytes_of(tag, n);
            shuffle::map_summary sum;
            sum.records = records;
            model_op pub = publish_op(m, q, data);
            rec.atomic(
                p,
                [&] {
                    store.publish(m, q, data.data(), data.size());
                    store.mark_complete(m, sum, 0);
                },
                [pub, m, records](digest& d) {
                    pub(d);
                    d[at_map(m)] = 1;
                    d[at_map(m) + 1] = records;
                });
        };
        publish(0, 0, 1, cap);
        publish(0, 1, 2, cap);
        publish(0, 0, 3, cap);
        commit(0, 1, 4, 100, 7);
        publish(1, 0, 5, cap);
        publish(1, 1, 6, cap);
        publish(1, 1, 7, 60);
        for (std::uint32_t q = 0; q < partitions; ++q)
            rec.atomic(
                p,
                [&] {
                    if (store.discard_step(1) == 0)
                        throw std::runtime_error("discard_step freed nothing");
                },
                [q](digest& d) {
                    for (std::size_t k = 0; k < slots_per_list; ++k)
                        d[at_list(1, q) + k] = 0;
                });
        publish(1, 0, 8, cap);
        commit(1, 1, 9, 30, 3);
        if (store.discard_incomplete().chunks_freed != 0)
            throw std::runtime_error("a complete map task was discarded");
    };
    return s;
}

/// Both map tasks, each written by one transaction (write_task): records stored raw into the
/// chunks it allocates, the lists and the complete flag at the end. Then a discard that finds
/// nothing to free.
scenario shuffle_task_transactions(tlptm::log_mode mode) {
    scenario s = shuffle_scenario("shuffle-task-transaction", mode);
    s.run = [](tlptm::pool& p, recorder& rec) {
        shuffle::nv_store store(p, 0, tiny_job(), tiny_store());
        if (!store.task_transactions())
            throw std::runtime_error("the store does not write map tasks in one transaction");
        // A first, small transaction: the slot's first commit after the pool opens starts a
        // log generation with a fence of its own, before the commit's flushes. Inside a map
        // task's transaction that fence would come after the raw stores and before the commit
        // announces them (it announces the whole allocated blocks), and the tracer's strict
        // check reports stores not announced at a fence. The crash images are unaffected:
        // before the commit the chunks are neither allocated nor reachable in any image.
        rec.atomic(
            p, [&] { store.entry(0).reserved[0] = 1; }, [](digest&) {});
        for (std::uint32_t m = 0; m < maps; ++m)
            rec.atomic(
                p,
                [&] {
                    if (shuffle::write_task(store, m) == 0)
                        throw std::runtime_error("write_task allocated no chunk");
                },
                task_op(m, store.chunk_capacity()));
        if (store.discard_incomplete().chunks_freed != 0)
            throw std::runtime_error("a complete map task was discarded");
    };
    return s;
}

sweep_config sweep_budget() {
    sweep_config cfg;
    const char* mode = std::getenv("TLPTM_SWEEP");
    if (mode && std::string(mode) == "long") {
        cfg.images = {16384, 512, 512, 128, 1};
        cfg.max_recoveries = 1000000;
        cfg.max_new_per_point = 1000000;
        cfg.recovery_crashes = 1000;
        cfg.max_per_recovery_crash = 1000000;
        cfg.recovery_images = {1024, 64, 64, 16, 1};
        return cfg;
    }
    cfg.images = {1024, 64, 64, 16, 1};
    cfg.max_recoveries = 1500;
    cfg.max_new_per_point = 32;
    cfg.recovery_crashes = 6;
    cfg.max_per_recovery_crash = 128;
    cfg.recovery_images = {256, 32, 32, 8, 1};
    return cfg;
}

} // namespace

TEST_CASE("crash sweep: a map task's chunk publications, commit, discard and rerun") {
    for (tlptm::log_mode mode : {tlptm::log_mode::tlptm, tlptm::log_mode::baseline}) {
        sweep_result r = run_sweep(shuffle_commit(mode), sweep_budget());
        MESSAGE(r.summary());
        for (const auto& m : r.messages)
            MESSAGE("  violation: " << m);
        CHECK_MESSAGE(r.violations == 0, r.name << ": " << r.violations << " violations");
        CHECK(r.transactions == 11);
        CHECK(r.crash_points > 0);
        CHECK(r.recoveries > 0);
    }
}

TEST_CASE("crash sweep: map tasks written by one transaction each, raw stores into chunks") {
    for (tlptm::log_mode mode : {tlptm::log_mode::tlptm, tlptm::log_mode::baseline}) {
        sweep_result r = run_sweep(shuffle_task_transactions(mode), sweep_budget());
        MESSAGE(r.summary());
        for (const auto& m : r.messages)
            MESSAGE("  violation: " << m);
        CHECK_MESSAGE(r.violations == 0, r.name << ": " << r.violations << " violations");
        CHECK(r.transactions == maps + 1);
        CHECK(r.crash_points > 0);
        CHECK(r.recoveries > 0);
    }
}

namespace {

/// Runs scenario `sc` with mutation `m`: the mutation must match an event and some crash image
/// must fail (the check is not vacuous).
void expect_caught(const scenario& sc, const mutation& m) {
    sweep_config cfg = sweep_budget();
    cfg.mut = m;
    cfg.max_messages = 2;
    sweep_result r = run_sweep(sc, cfg);
    MESSAGE(r.summary());
    for (const auto& msg : r.messages)
        MESSAGE("  violation: " << msg);
    CHECK(r.mutation_matched);
    CHECK(r.violations > 0);
}

} // namespace

TEST_CASE("the sweep catches a raw-stored chunk data line that is never flushed") {
    // write_task stores the records with plain memcpy: only the library's flush of every line
    // of the blocks the transaction allocated makes them durable. Drop one of those flushes
    // (a data line of the first chunk) and some crash image holds a committed task whose
    // chunk lacks those bytes: the content hash differs. The first task's commit flushes every
    // line of its chunks in address order and fences them (F0) before it locks its write-set;
    // the harness counts those flushes as write-back flushes (they follow the first
    // transaction's F1 with no fence between). #3 is the fourth line of the first chunk.
    expect_caught(shuffle_task_transactions(tlptm::log_mode::tlptm),
                  mutation::drop_flush(role::write_back_flush, 3));
}

TEST_CASE("the sweep catches a chunk whose data is never written back") {
    // The check is not vacuous: with the write-back of a chunk's data dropped, some crash
    // image holds a committed chunk without those bytes, and the content hash differs. With
    // non-temporal entries (the tests' policy) the commit writes the chunk again with
    // non-temporal stores (one stream per block); with entries stored and flushed it flushes
    // the chunk's lines (#2: one line of its data).
    expect_caught(shuffle_commit(tlptm::log_mode::tlptm),
                  mutation::drop_stream(role::aalo_stream, 0));
    scenario flushed = shuffle_commit(tlptm::log_mode::tlptm);
    flushed.options.log_write = tlptm::log_write::store_and_flush;
    flushed.name += "/store-and-flush";
    expect_caught(flushed, mutation::drop_flush(role::aalo_flush, 2));
}
