// The persistent shuffle store of examples/shuffle: every backend delivers exactly what the
// map tasks emitted (the in-memory no-shuffle baseline too), lazy allocation leaves empty (map,
// partition) pairs without chunks, an incomplete map task's chunks are freed without a leak, and a
// map stage killed with SIGKILL restarts with only the incomplete map tasks and the crash-free
// checksum.
//
// TLPTM_SHUFFLE_KILLS=<n> sets the kills of the SIGKILL test (default 4; docs/shuffle.md runs
// the long mode with tlptm-shuffle --mode crash --kills 30).

#include "../examples/shuffle/driver.hpp"
#include "test_util.hpp"

#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace {

using namespace shuffle;

std::string test_dir() {
    const char* dir = std::getenv("TLPTM_TEST_DIR");
    std::string d = dir && *dir ? dir : TLPTM_TEST_TMPDIR;
    if (!std::filesystem::is_directory(d))
        d = std::filesystem::temp_directory_path().string();
    return d;
}

job_options small_job(workload_kind kind = workload_kind::terasort) {
    job_options o;
    o.w.kind = kind;
    o.w.input_bytes = 2u << 20;
    o.w.maps = 4;
    o.w.partitions = 8;
    o.w.vocabulary = 2048;
    if (kind == workload_kind::wordcount)
        o.w.zipf = 0.99;
    o.threads = 2;
    o.dir = test_dir();
    o.tag = "test";
    return o;
}

tlptm::pool_options test_pool(const job_options& o) {
    tlptm::pool_options p = o.pool();
    p.size = std::size_t{64} << 20;
    p.log_capacity = std::size_t{1} << 20;
    return p;
}

} // namespace

TEST_CASE("every backend delivers what the map tasks emitted, with one checksum") {
    for (workload_kind kind : {workload_kind::terasort, workload_kind::wordcount}) {
        CAPTURE(to_string(kind));
        job_options o = small_job(kind);
        std::vector<std::uint64_t> sums;
        for (backend_kind b : {backend_kind::tlptm_private, backend_kind::tlptm_shared,
                               backend_kind::file_hash, backend_kind::file_sort}) {
            CAPTURE(to_string(b));
            o.backend = b;
            job_result r = run_job(o);
            CHECK(r.error.empty());
            CHECK(r.shuffle_bytes > 0);
            CHECK(r.maps_run == o.w.maps);
            sums.push_back(r.checksum);
        }
        for (std::uint64_t s : sums)
            CHECK(s == sums.front());
    }
}

TEST_CASE("the in-memory baseline (no shuffle) reduces the same records to the same checksum") {
    for (workload_kind kind : {workload_kind::terasort, workload_kind::wordcount}) {
        CAPTURE(to_string(kind));
        job_options o = small_job(kind);
        o.chunk_size = 8192;
        o.backend = backend_kind::tlptm_private;
        job_result ref = run_job(o);
        REQUIRE(ref.error.empty());
        for (backend_kind b : {backend_kind::file_hash, backend_kind::file_sort}) {
            o.backend = b;
            job_result f = run_job(o);
            CHECK(f.error.empty());
            CHECK(f.checksum == ref.checksum);
        }
        for (bool prefault : {true, false}) {
            CAPTURE(prefault);
            o.backend = backend_kind::in_memory;
            o.prefault = prefault;
            job_result r = run_job(o);
            CHECK(r.backend == "in-memory");
            CHECK_MESSAGE(r.error.empty(), r.error);
            CHECK(r.checksum == ref.checksum);
            CHECK(r.maps_run == o.w.maps);
            CHECK(r.shuffle_bytes == ref.shuffle_bytes);
            CHECK(r.shuffle_records == ref.shuffle_records);
            CHECK(r.outputs == ref.outputs);
            CHECK(r.transactions == 0);
            CHECK(r.aborts == 0);
            // Blocks of the job's chunk size (at least 4 KiB), each holding whole records: the
            // data plus less than one partly filled block per (map, partition) pair.
            CHECK(r.chunk_size == o.chunk_size);
            CHECK(r.allocations > 0);
            CHECK(r.space_bytes == r.allocations * r.chunk_size);
            CHECK(r.space_bytes >= r.shuffle_bytes);
            std::uint64_t pairs = std::uint64_t{o.w.maps} * o.w.partitions;
            CHECK(r.space_bytes <= r.shuffle_bytes + r.shuffle_bytes / 40 + pairs * r.chunk_size);
            CHECK(r.map_cpu_s > 0);
            CHECK(r.reduce_cpu_s > 0);
            CHECK(r.fetch_cpu_s <= r.reduce_cpu_s);
        }
    }
}

TEST_CASE("the in-memory store: whole records per block, full blocks, the maps' summaries") {
    for (workload_kind kind : {workload_kind::terasort, workload_kind::wordcount}) {
        CAPTURE(to_string(kind));
        job_options o = small_job(kind);
        memory_store store(o.w, 5000, true, true); // rounded up to 8 KiB
        CHECK(store.block_bytes() == 8192);
        for (std::uint32_t m = 0; m < o.w.maps; ++m) {
            CHECK_FALSE(store.complete(m));
            store.run_map_task(m);
            CHECK(store.complete(m));
        }
        map_summary want;
        for (std::uint32_t m = 0; m < o.w.maps; ++m) {
            want.records += store.summary(m).records;
            want.bytes += store.summary(m).bytes;
            want.content += store.summary(m).content;
        }
        reduce_result got;
        std::uint64_t pieces = 0;
        for (std::uint32_t p = 0; p < o.w.partitions; ++p) {
            partition_data data;
            store.read_partition(p, data);
            CHECK(data.owned.empty()); // read in place
            for (const auto& piece : data.pieces) {
                CHECK(piece.size() <= store.block_bytes());
                CHECK(whole_records_within(o.w, piece.data(), piece.size(), piece.size()) ==
                      piece.size());
            }
            pieces += data.pieces.size();
            reduce_result r = reduce_partition(o.w, p, data);
            CHECK_MESSAGE(r.error.empty(), r.error);
            got.records += r.records;
            got.bytes += r.bytes;
            got.content += r.content;
        }
        CHECK(got.records == want.records);
        CHECK(got.bytes == want.bytes);
        CHECK(got.content == want.content);
        CHECK(store.space_used() == pieces * store.block_bytes());
        if (kind == workload_kind::terasort) // every block of a list but the last is full
            CHECK(pieces <= want.bytes / (8192 / o.w.record_size * o.w.record_size) +
                                std::uint64_t{o.w.maps} * o.w.partitions);
    }
}

TEST_CASE("a different seed gives a different checksum (the checksum sees the data)") {
    job_options o = small_job();
    job_result a = run_job(o);
    o.w.seed = 2;
    job_result b = run_job(o);
    CHECK(a.error.empty());
    CHECK(b.error.empty());
    CHECK(a.checksum != b.checksum);
}

TEST_CASE("space: private buffers hold the data plus less than one chunk per pair") {
    job_options o = small_job();
    o.chunk_size = 4096;
    job_result r = run_job(o);
    REQUIRE(r.error.empty());
    std::uint64_t pairs = std::uint64_t{o.w.maps} * o.w.partitions;
    // Every chunk but the last of a list holds as many whole records as fit (40 of 100 bytes
    // in 4080): chunks = ceil(records / 40) per list.
    CHECK(r.space_bytes >= r.shuffle_bytes);
    CHECK(r.space_bytes <= r.shuffle_bytes + r.shuffle_bytes / 40 + pairs * o.chunk_size);
    CHECK(r.table_bytes >= nv_store::table_bytes_for(o.w.maps, pairs));
    CHECK(r.allocations * o.chunk_size + r.table_bytes == r.space_bytes);
    CHECK(r.empty_chunks == 0);
}

TEST_CASE("lazy allocation: empty (map, partition) pairs get no chunk; eager gives each one") {
    job_options o = small_job();
    o.w.partitions = 256;
    o.w.zipf = 1.2; // the hot keys fall into the first partitions: most pairs stay empty
    o.w.input_bytes = 1u << 20;
    std::string path = o.pool_path();
    for (bool lazy : {true, false}) {
        CAPTURE(lazy);
        o.lazy = lazy;
        std::filesystem::remove(path);
        tlptm::pool pool = tlptm::pool::create(path, test_pool(o));
        pool.root<shuffle_root>();
        tlptm::stats before = pool.stats();
        nv_store store(pool, 0, o.w, o.store());
        job_result r =
            run_tlptm(o, pool, store, before.heap.bytes_in_use, before.heap.bytes_in_superblocks);
        REQUIRE(r.error.empty());
        std::uint64_t empty_lists = 0, chunks = 0;
        for (std::uint32_t m = 0; m < o.w.maps; ++m)
            for (std::uint32_t p = 0; p < o.w.partitions; ++p) {
                const chunk_list& l = store.list(m, p);
                chunks += l.chunks.get();
                if (l.head.get() == nullptr)
                    ++empty_lists;
            }
        CHECK(chunks == r.allocations);
        if (lazy) {
            CHECK(empty_lists > o.w.maps * o.w.partitions / 2);
            CHECK(r.empty_chunks == 0);
        } else {
            CHECK(empty_lists == 0);
            CHECK(r.empty_chunks > o.w.maps * o.w.partitions / 2);
        }
        pool.close();
        std::filesystem::remove(path);
    }
}

TEST_CASE("discarding an incomplete map task frees exactly its chunks; the rerun matches") {
    job_options o = small_job();
    o.chunk_size = 1024;
    std::string path = o.pool_path();
    std::filesystem::remove(path);
    crash_reference ref = reference_run(o);
    {
        tlptm::pool pool = tlptm::pool::create(path, test_pool(o));
        pool.root<shuffle_root>();
        nv_store store(pool, 0, o.w, o.store());
        CHECK(pool.stats().heap.bytes_in_use == ref.heap_with_table);
        run_map_task(store, 0);
        run_map_task(store, 1);
        std::uint64_t kept = pool.stats().heap.bytes_in_use;
        // Map task 2 publishes chunks, then "crashes" before its final transaction.
        std::vector<std::uint8_t> bytes(store.chunk_capacity(), 0xab);
        for (std::uint32_t p = 0; p < o.w.partitions; ++p)
            for (int k = 0; k < 3; ++k)
                store.publish(2, p, bytes.data(), bytes.size());
        CHECK(pool.stats().heap.bytes_in_use == kept + 3ull * o.w.partitions * o.chunk_size);
        CHECK_FALSE(store.complete(2));
        // write_task checks, before its transaction, that the task has no chunks yet.
        CHECK_THROWS_AS(write_task(store, 2), std::logic_error);
        CHECK(pool.stats().heap.bytes_in_use == kept + 3ull * o.w.partitions * o.chunk_size);
    }
    {
        tlptm::pool pool = tlptm::pool::open(path, test_pool(o));
        nv_store store(pool, 0, o.w, o.store());
        discard_report d = store.discard_incomplete();
        CHECK(d.complete == 2);
        CHECK(d.incomplete == 2);
        CHECK(d.chunks_freed == 3ull * o.w.partitions);
    }
    {
        // Reopened: the heap is rebuilt from the persistent bitmaps (the frees are no longer
        // pending), so bytes in use are exactly the allocated blocks.
        tlptm::pool pool = tlptm::pool::open(path, test_pool(o));
        nv_store store(pool, 0, o.w, o.store());
        std::uint64_t expect = ref.heap_with_table;
        for (std::uint32_t m : {0u, 1u})
            expect += store.entry(m).chunks.get() * o.chunk_size;
        CHECK(pool.stats().heap.bytes_in_use == expect);
        for (std::uint32_t p = 0; p < o.w.partitions; ++p)
            CHECK(store.list(2, p).head.get() == nullptr);
        job_result r = run_tlptm(o, pool, store, 0, 0);
        CHECK(r.error.empty());
        CHECK(r.maps_run == 2);
        CHECK(r.checksum == ref.checksum);
        // Nothing is left to discard, and discarding again changes nothing.
        discard_report again = store.discard_incomplete();
        CHECK(again.incomplete == 0);
        CHECK(again.chunks_freed == 0);
    }
    {
        tlptm::pool pool = tlptm::pool::open(path, test_pool(o));
        CHECK(pool.stats().heap.bytes_in_use == ref.heap_final);
    }
    std::filesystem::remove(path);
}

TEST_CASE("a stored shuffle is resumed only by the same job") {
    job_options o = small_job();
    std::string path = o.pool_path();
    std::filesystem::remove(path);
    {
        tlptm::pool pool = tlptm::pool::create(path, test_pool(o));
        nv_store store(pool, 0, o.w, o.store());
        workload other = o.w;
        other.seed = 99;
        CHECK_THROWS_AS(nv_store(pool, 0, other, o.store()), std::invalid_argument);
        store_options bigger = o.store();
        bigger.chunk_size *= 2;
        CHECK_THROWS_AS(nv_store(pool, 0, o.w, bigger), std::invalid_argument);
        nv_store second(pool, 1, other, o.store()); // another shuffle id is another table
        CHECK_FALSE(second.complete(0));
    }
    std::filesystem::remove(path);
}

TEST_CASE("shared buffers cannot discard one map task's output") {
    job_options o = small_job();
    o.backend = backend_kind::tlptm_shared;
    std::string path = o.pool_path();
    std::filesystem::remove(path);
    {
        tlptm::pool pool = tlptm::pool::create(path, test_pool(o));
        nv_store store(pool, 0, o.w, o.store());
        CHECK_THROWS_AS(store.discard_step(0), std::logic_error);
    }
    std::filesystem::remove(path);
}

TEST_CASE("SIGKILL in the map stage: the restart reruns only incomplete tasks, same checksum") {
    job_options o = small_job();
    o.w.input_bytes = 24u << 20;
    o.w.maps = 12;
    o.tag = "kill";
    unsigned kills = 4;
    if (const char* v = std::getenv("TLPTM_SHUFFLE_KILLS"))
        kills = static_cast<unsigned>(std::strtoul(v, nullptr, 10));
    crash_reference ref = reference_run(o);
    MESSAGE("crash-free map stage " << ref.map_s << " s");
    unsigned killed = 0, partial = 0;
    for (unsigned k = 0; k < kills; ++k) {
        double after = ref.map_s * (0.1 + 0.8 * (k + 0.5) / kills);
        crash_trial t = crash_and_restart(o, ref, after);
        CAPTURE(k);
        CAPTURE(after);
        CHECK_MESSAGE(t.error.empty(), t.error);
        CHECK(t.checksum == ref.checksum);
        CHECK(t.rerun == o.w.maps - t.complete_before);
        CHECK(t.heap_after_discard == t.heap_expected_after_discard);
        CHECK(t.heap_final == ref.heap_final);
        killed += t.killed;
        partial += t.killed && t.complete_before > 0 && t.complete_before < o.w.maps;
        MESSAGE("kill " << k << " after " << after << " s: " << t.complete_before << " tasks kept, "
                        << t.rerun << " rerun, " << t.discarded.chunks_freed
                        << " chunks freed, restart " << t.restart_s * 1e3 << " ms"
                        << std::string(t.killed ? "" : " (finished before the kill)"));
    }
    // The kills land in the map stage: at least one kept some map tasks and reran others.
    CHECK(killed > 0);
    CHECK(partial > 0);
}
