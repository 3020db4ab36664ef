// The persistent shuffle store: NV-Shuffle's NV-buffers and mapping table in a tlptm pool.
//
// Layout (all in the pool):
//
//   shuffle_root.tables[shuffle id] ──► table block
//       table_header   magic, job fingerprint, M, R, chunk size, layout
//       map_entry[M]   per map task: complete flag, and what it emitted (records, bytes, units,
//                      content hash) — one 64-byte line each
//       chunk_list[L]  head, tail, bytes, chunks of one buffer: L = M * R with private buffers
//                      (one per (map task, partition)), L = R with shared buffers
//   chunk              next, used, then chunk_size - 16 bytes of record data
//
// The table is the mapping (shuffle, map, partition) -> chunk list of the paper: reducers find
// their data through it, and after a crash recovery frees, through it, every chunk of a map
// task that did not complete.
//
// Map side, private buffers with lazy allocation (the default): a map task is ONE transaction
// (write_task). Its records are generated straight into chunks the transaction allocates
// (tx.alloc, then plain stores: the library flushes every line of every block a transaction
// allocated before the commit makes its log entry durable, and logs none of those bytes); a
// chunk holds whole records; at the end the transaction links nothing but the lists' head,
// tail and counters and sets the task's complete flag: the log entry holds those words and the
// allocator's metadata words. Before the commit none of the task's output exists in a crash
// image (its chunks are not even allocated); after it, all of it does: a crashed task leaves
// nothing to discard. One map task commits at a time (nv_store::commit_gate).
//
// Otherwise (shared buffers, eager allocation, or task_transaction off) a map task stages each
// partition's records in volatile memory and publishes a batch of whole records, at most a
// chunk's worth, with one transaction that allocates a chunk, copies the bytes in with tx.write
// (AALO: written in place, flushed before the commit, not logged) and links it at the tail of
// the list. The task ends with one transaction that publishes the partly filled batches and
// sets its complete flag; a crash before it leaves published chunks that discard_incomplete()
// frees.
//
// Every chunk holds whole records, so the reducers read the records in place in the pool.
//
// Private buffers (the paper's choice): a map task writes only its own lists and map entry
// (and allocator metadata), so map tasks hardly conflict and an incomplete task's chunks can be
// freed without touching anyone else's. Shared buffers: one list per partition that every map task
// appends to; an append first fills the free space of the partition's tail chunk (a chunk another
// transaction allocated, so those bytes are logged) and the STM serialises concurrent appends. A
// crashed map task's records are then mixed with the others': shared buffers cannot be resumed.
//
// Lazy allocation (default): a chunk is allocated only when a partition has data for it.
// Eager allocation (for comparison, as a shuffle that pre-creates its files would): a map task
// first allocates one empty chunk for every partition; the first batch of a partition fills
// that chunk (in place through the write-set: logged, since another transaction allocated it).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#include <tlptm/tlptm.hpp>

#include "workload.hpp"

namespace shuffle {

/// A chunk of an NV-buffer: a header, then the record bytes.
struct chunk {
    tlptm::p<chunk*> next;
    tlptm::p<std::uint64_t> used; ///< bytes of record data in this chunk
};
inline constexpr std::size_t chunk_header_bytes = sizeof(chunk);
static_assert(chunk_header_bytes == 16);

inline std::uint8_t* chunk_data(chunk* c) noexcept {
    return reinterpret_cast<std::uint8_t*>(c) + chunk_header_bytes;
}

/// One NV-buffer: the chunks of one (map task, partition) pair, or of one partition (shared).
struct chunk_list {
    tlptm::p<chunk*> head, tail;
    tlptm::p<std::uint64_t> bytes, chunks;
};
static_assert(sizeof(chunk_list) == 32);

/// A map task's row of the mapping table (one cache line).
struct map_entry {
    tlptm::p<std::uint64_t> complete; ///< 1 once the task's final transaction committed
    tlptm::p<std::uint64_t> records, bytes, units, content;
    tlptm::p<std::uint64_t> chunks; ///< chunks the task allocated (eager ones included)
    tlptm::p<std::uint64_t> reserved[2];
};
static_assert(sizeof(map_entry) == 64);

enum class buffer_layout : std::uint64_t { private_buffers = 1, shared_buffers = 2 };

struct table_header {
    tlptm::p<std::uint64_t> magic;
    tlptm::p<std::uint64_t> fingerprint; ///< workload::fingerprint() of the job
    tlptm::p<std::uint64_t> maps, partitions, chunk_size, layout, lazy;
    tlptm::p<std::uint64_t> reserved;
};
static_assert(sizeof(table_header) == 64);

inline constexpr std::uint64_t table_magic = 0x5348554646'4c4531ull; // "SHUFFLE1"
inline constexpr std::size_t max_shuffles = 8;

/// The pool's root: one mapping table per shuffle id.
struct shuffle_root {
    tlptm::p<std::uint64_t> format;
    tlptm::p<std::uint8_t*> tables[max_shuffles];
};

struct store_options {
    std::size_t chunk_size = 8192; ///< bytes per chunk, header included (>= 64, multiple of 16)
    buffer_layout layout = buffer_layout::private_buffers;
    bool lazy = true; ///< allocate a chunk only when its partition has data
    /// Private buffers, lazy allocation: a map task's whole output in one transaction, records
    /// written straight into its chunks (true); or staged in volatile memory and published one
    /// chunk per transaction (false, as the shared and eager layouts always do).
    bool task_transaction = true;
    /// Reducers read the records in place in the pool (true) or copy them out first (false).
    bool read_in_place = true;
    /// write_task maps a new chunk's pages with one madvise(MADV_POPULATE_WRITE) before
    /// writing it, instead of taking a page fault per 4 KiB on first touch (the pool is a file:
    /// a fresh pool's pages exist only once touched). Changes no byte of the pool.
    bool populate_chunks = false;
};

/// What discarding the incomplete map tasks did.
struct discard_report {
    std::uint32_t complete = 0;   ///< map tasks kept
    std::uint32_t incomplete = 0; ///< map tasks whose output was discarded (they must rerun)
    std::uint64_t chunks_freed = 0;
    std::uint64_t bytes_freed = 0; ///< chunk bytes (chunk_size each)
    std::uint64_t transactions = 0;
    double seconds = 0;
};

/// The shuffle store of one shuffle in an open pool. Thread-safe in the ways a shuffle needs:
/// map writers of different map tasks run concurrently; reads run after the map stage.
class nv_store {
public:
    /// Frees at most this many chunks per transaction when discarding (bounds the log entry).
    static constexpr std::size_t frees_per_tx = 256;

    /// Opens shuffle `id` of the pool, creating its mapping table if there is none.
    /// @throw std::invalid_argument bad options; the stored table belongs to another job or
    ///        another chunk size / layout
    nv_store(tlptm::pool& pool, std::uint32_t id, const workload& w, const store_options& opt)
        : pool_(pool), w_(w), opt_(opt) {
        if (id >= max_shuffles)
            throw std::invalid_argument("shuffle id must be below " + std::to_string(max_shuffles));
        if (opt.chunk_size < 64 || opt.chunk_size % 16 != 0)
            throw std::invalid_argument("the chunk size must be a multiple of 16, at least 64");
        if (opt.chunk_size - chunk_header_bytes < max_record_bytes(w))
            throw std::invalid_argument(
                "a chunk must hold a whole record: chunks of " + std::to_string(opt.chunk_size) +
                " bytes hold " + std::to_string(opt.chunk_size - chunk_header_bytes) +
                " bytes of data, records are up to " + std::to_string(max_record_bytes(w)));
        lists_ = opt.layout == buffer_layout::private_buffers ? std::uint64_t{w.maps} * w.partitions
                                                              : w.partitions;
        root_ = pool.root<shuffle_root>();
        std::uint8_t* t = root_->tables[id].get();
        if (t == nullptr)
            t = create_table(id);
        table_ = t;
        const table_header* h = header();
        if (h->magic.get() != table_magic)
            throw std::invalid_argument("shuffle table " + std::to_string(id) + " is damaged");
        if (h->fingerprint.get() != w.fingerprint() || h->maps.get() != w.maps ||
            h->partitions.get() != w.partitions || h->chunk_size.get() != opt.chunk_size ||
            h->layout.get() != static_cast<std::uint64_t>(opt.layout) ||
            h->lazy.get() != std::uint64_t{opt.lazy})
            throw std::invalid_argument("shuffle " + std::to_string(id) +
                                        " in this pool belongs to another job (workload, "
                                        "chunk size or buffer layout differ)");
    }

    tlptm::pool& pool() const noexcept { return pool_; }
    std::size_t chunk_size() const noexcept { return opt_.chunk_size; }
    std::size_t chunk_capacity() const noexcept { return opt_.chunk_size - chunk_header_bytes; }
    const store_options& options() const noexcept { return opt_; }
    const workload& job() const noexcept { return w_; }
    /// Bytes of the mapping table block.
    std::size_t table_bytes() const noexcept { return table_bytes_for(w_.maps, lists_); }

    map_entry& entry(std::uint32_t m) const noexcept {
        return reinterpret_cast<map_entry*>(table_ + sizeof(table_header))[m];
    }
    chunk_list& list(std::uint32_t m, std::uint32_t p) const noexcept {
        std::uint64_t i = opt_.layout == buffer_layout::private_buffers
                              ? std::uint64_t{m} * w_.partitions + p
                              : p;
        return reinterpret_cast<chunk_list*>(table_ + sizeof(table_header) +
                                             sizeof(map_entry) * w_.maps)[i];
    }
    bool complete(std::uint32_t m) const { return entry(m).complete.get() == 1; }
    /// Held by a map task's transaction (write_task) from the end of its work through its
    /// commit, so that two map tasks never commit at once. A commit holds its write-set's
    /// orecs while it flushes every line of the task's chunks (megabytes); a concurrent commit
    /// that needs one of them — both may write the same allocator word, the heap summary of an
    /// arena where both took superblocks — gives up after a short spin and the whole task
    /// reruns. The gate turns those reruns (4-10 per 16 tasks at 2 threads) into a short wait.
    std::mutex& commit_gate() noexcept { return commit_gate_; }
    /// True if map task m's output is written by one transaction (write_task).
    bool task_transactions() const noexcept {
        return opt_.task_transaction && opt_.lazy && opt_.layout == buffer_layout::private_buffers;
    }

    // ---- map side: the transactions of a map task ----------------------------------------------

    /// Publishes n bytes (n <= chunk_capacity(), whole records) at the tail of list (m, p) in
    /// the running transaction, or in one of its own: private layout and lazy allocation: a new
    /// chunk; eager: the list's empty pre-allocated chunk if it has one; shared: as many whole
    /// records as fit in the tail chunk's free space first. Returns the chunks it allocated.
    std::uint64_t publish(std::uint32_t m, std::uint32_t p, const std::uint8_t* data,
                          std::size_t n) {
        return tlptm::atomic(pool_, [&](tlptm::tx& tx) -> std::uint64_t {
            chunk_list& l = list(m, p);
            chunk* tail = l.tail.get();
            std::size_t done = 0;
            if (tail != nullptr && (opt_.layout == buffer_layout::shared_buffers || !opt_.lazy)) {
                std::uint64_t used = tail->used.get();
                // Whole records only: every chunk holds whole records (reducers read in place).
                std::size_t k = whole_records_within(w_, data, n, chunk_capacity() - used);
                if (k > 0) {
                    tx.write(chunk_data(tail) + used, data, k); // logged: an older chunk
                    tail->used = used + k;
                    done = k;
                }
            }
            std::uint64_t fresh = 0;
            while (done < n) {
                std::size_t k = std::min(chunk_capacity(), n - done);
                chunk* c = new_chunk(tx, data + done, k);
                if (tail != nullptr)
                    tail->next = c;
                else
                    l.head = c;
                l.tail = c;
                tail = c;
                done += k;
                ++fresh;
            }
            l.bytes += n;
            if (fresh > 0)
                l.chunks += fresh;
            return fresh;
        });
    }

    /// Eager allocation: one empty chunk for every partition of map task m (one transaction).
    std::uint64_t preallocate(std::uint32_t m) {
        return tlptm::atomic(pool_, [&](tlptm::tx& tx) -> std::uint64_t {
            for (std::uint32_t p = 0; p < w_.partitions; ++p) {
                chunk_list& l = list(m, p);
                chunk* c = new_chunk(tx, nullptr, 0);
                if (chunk* tail = l.tail.get())
                    tail->next = c;
                else
                    l.head = c;
                l.tail = c;
                l.chunks += 1;
            }
            return w_.partitions;
        });
    }

    /// Records what map task m emitted and marks it complete (joins the running transaction).
    void mark_complete(std::uint32_t m, const map_summary& s, std::uint64_t chunks) {
        tlptm::atomic(pool_, [&] {
            map_entry& e = entry(m);
            e.records = s.records;
            e.bytes = s.bytes;
            e.units = s.units;
            e.content = s.content;
            e.chunks = chunks;
            e.complete = 1;
        });
    }

    /// One step of discarding map task m's output: frees up to `max_frees` chunks of its
    /// first non-empty list in one transaction. Returns the chunks freed (0: nothing left).
    /// A crash between steps leaves lists that are suffixes of the old ones: discarding again
    /// finishes the job (idempotent).
    std::uint64_t discard_step(std::uint32_t m, std::size_t max_frees = frees_per_tx) {
        if (opt_.layout != buffer_layout::private_buffers)
            throw std::logic_error("shared buffers mix the map tasks' records: one map task's "
                                   "output cannot be discarded");
        return tlptm::atomic(pool_, [&](tlptm::tx& tx) -> std::uint64_t {
            map_entry& e = entry(m);
            if (e.complete.get() == 1)
                return 0;
            for (std::uint32_t p = 0; p < w_.partitions; ++p) {
                chunk_list& l = list(m, p);
                chunk* c = l.head.get();
                if (c == nullptr)
                    continue;
                std::uint64_t freed = 0;
                while (c != nullptr && freed < max_frees) {
                    chunk* next = c->next.get();
                    tx.free(c);
                    c = next;
                    ++freed;
                }
                l.head = c;
                if (c == nullptr) {
                    l.tail = nullptr;
                    l.bytes = 0;
                    l.chunks = 0;
                }
                return freed;
            }
            return 0;
        });
    }

    /// After a crash: frees every chunk of every map task that did not complete; the
    /// complete ones are kept. The caller then reruns the incomplete tasks.
    discard_report discard_incomplete() {
        auto t0 = std::chrono::steady_clock::now();
        discard_report r;
        for (std::uint32_t m = 0; m < w_.maps; ++m) {
            if (complete(m)) {
                ++r.complete;
                continue;
            }
            ++r.incomplete;
            for (;;) {
                std::uint64_t n = discard_step(m);
                ++r.transactions;
                if (n == 0)
                    break;
                r.chunks_freed += n;
            }
        }
        r.bytes_freed = r.chunks_freed * opt_.chunk_size;
        r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        return r;
    }

    // ---- reduce side ---------------------------------------------------------------------------

    /// Partition p's records of every complete map task (private) or of the partition's shared
    /// buffer, straight from the pool: one piece per chunk, pointing into the chunk (or, with
    /// read_in_place off, into one copy). Call after the map stage (no writer runs).
    void read_partition(std::uint32_t p, partition_data& out) const {
        const std::size_t first = out.pieces.size();
        auto walk = [&](const chunk_list& l) {
            for (chunk* c = l.head.get(); c != nullptr; c = c->next.get()) {
                std::uint64_t n = c->used.get();
                if (n > chunk_capacity())
                    throw std::runtime_error("chunk claims " + std::to_string(n) + " bytes");
                if (n > 0)
                    out.pieces.emplace_back(chunk_data(c), n);
            }
        };
        if (opt_.layout == buffer_layout::shared_buffers) {
            walk(list(0, p));
        } else {
            for (std::uint32_t m = 0; m < w_.maps; ++m)
                if (complete(m))
                    walk(list(m, p));
        }
        if (opt_.read_in_place)
            return;
        std::uint64_t total = 0;
        for (std::size_t i = first; i < out.pieces.size(); ++i)
            total += out.pieces[i].size();
        std::uint8_t* buf = total ? out.storage(total) : nullptr;
        std::uint64_t at = 0;
        for (std::size_t i = first; i < out.pieces.size(); ++i) {
            std::memcpy(buf + at, out.pieces[i].data(), out.pieces[i].size());
            at += out.pieces[i].size();
        }
        out.pieces.resize(first);
        if (total)
            out.pieces.emplace_back(buf, total);
    }

    /// Chunks that hold no data (eager allocation's unused chunks).
    std::uint64_t empty_chunks() const {
        std::uint64_t n = 0;
        const auto* lists = reinterpret_cast<const chunk_list*>(table_ + sizeof(table_header) +
                                                                sizeof(map_entry) * w_.maps);
        for (std::uint64_t i = 0; i < lists_; ++i)
            if (chunk* t = lists[i].tail.get(); t != nullptr && t->used.get() == 0)
                ++n;
        return n;
    }

    static std::size_t table_bytes_for(std::uint64_t maps, std::uint64_t lists) noexcept {
        return sizeof(table_header) + sizeof(map_entry) * maps + sizeof(chunk_list) * lists;
    }

private:
    table_header* header() const noexcept { return reinterpret_cast<table_header*>(table_); }

    /// A chunk holding n bytes of data, allocated in the running transaction: every byte of
    /// it goes through tx.write, so it is written in place and flushed before the commit (AALO).
    chunk* new_chunk(tlptm::tx& tx, const std::uint8_t* data, std::size_t n) {
        auto* c = static_cast<chunk*>(tx.alloc(opt_.chunk_size));
        const std::uint64_t head[2] = {0, n};
        tx.write(c, head, sizeof head);
        if (n > 0)
            tx.write(chunk_data(c), data, n);
        return c;
    }

    std::uint8_t* create_table(std::uint32_t id) {
        std::size_t n = table_bytes_for(w_.maps, lists_);
        return tlptm::atomic(pool_, [&](tlptm::tx& tx) {
            auto* t = static_cast<std::uint8_t*>(tx.alloc(n));
            std::vector<std::uint8_t> zero(std::min<std::size_t>(n, 1 << 16));
            for (std::size_t at = 0; at < n; at += zero.size())
                tx.write(t + at, zero.data(), std::min(zero.size(), n - at));
            const std::uint64_t h[8] = {table_magic,
                                        w_.fingerprint(),
                                        w_.maps,
                                        w_.partitions,
                                        opt_.chunk_size,
                                        static_cast<std::uint64_t>(opt_.layout),
                                        std::uint64_t{opt_.lazy},
                                        0};
            tx.write(t, h, sizeof h);
            root_->format = 1;
            root_->tables[id] = t;
            return t;
        });
    }

    tlptm::pool& pool_;
    workload w_;
    store_options opt_;
    std::uint64_t lists_ = 0;
    shuffle_root* root_ = nullptr;
    std::uint8_t* table_ = nullptr;
    std::mutex commit_gate_;
};

/// Private buffers, lazy allocation: runs map task m in ONE transaction that is also its
/// commit. Records are generated straight into chunks the transaction allocates (tx.alloc,
/// then plain stores, no staging copy: the library flushes every line of every block a transaction
/// allocated before its commit makes the log entry durable, and logs none of them); a chunk holds
/// whole records; when a partition's chunk is full the next one is allocated and linked. At the end
/// the transaction sets the lists' head, tail and counters and the complete flag: the only
/// logged words, with the allocator's bitmap and descriptor words. Before the commit none of
/// the task's chunks is reachable or allocated in a crash image; after it all of them are.
/// A retry (an orec conflict) reruns the task from the start. Returns the chunks allocated.
inline std::uint64_t write_task(nv_store& store, std::uint32_t m) {
    const workload& w = store.job();
    const std::size_t cap = store.chunk_capacity();
    const std::size_t chunk_bytes = store.chunk_size();
    struct cursor {
        chunk* head = nullptr;
        chunk* tail = nullptr;
        std::uint8_t* at = nullptr; ///< next free byte of the tail chunk
        std::uint8_t* end = nullptr;
        std::uint64_t bytes = 0, chunks = 0;
    };
    std::vector<cursor> cur;
    const bool populate = store.options().populate_chunks;
    const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    // Checked before the transaction, with plain reads (only this task writes its lists): the
    // transaction reads nothing, so its commit has no read-set that can fail validation. Read
    // inside it, the list heads made about one run in two of the default job rerun a whole map
    // task: tlptm's orecs are shared by granules 4 MiB apart, and in the default job's pool the
    // descriptor words of 8 superblocks share an orec with a list head; another task's commit
    // that took one of those superblocks invalidated the read.
    for (std::uint32_t p = 0; p < w.partitions; ++p)
        if (store.list(m, p).head.get() != nullptr)
            throw std::logic_error("map task " + std::to_string(m) +
                                   " already has chunks: discard_incomplete() first");
    // The commit gate: one map task commits at a time (see nv_store::commit_gate).
    std::unique_lock<std::mutex> gate(store.commit_gate(), std::defer_lock);
    return tlptm::atomic(store.pool(), [&](tlptm::tx& tx) -> std::uint64_t {
        if (gate.owns_lock())
            gate.unlock(); // the previous attempt failed at its commit: retry ungated
        cur.assign(w.partitions, cursor{}); // a retry starts over
        // Raw stores into a block of this transaction: the header words are plain memory here.
        auto set_used = [](chunk* c, std::uint64_t used) {
            std::memcpy(reinterpret_cast<std::uint8_t*>(c) + 8, &used, 8);
        };
        map_summary s = run_map_into(w, m, [&](std::uint32_t p, std::size_t n) {
            cursor& c = cur[p];
            if (static_cast<std::size_t>(c.end - c.at) < n) {
                auto* k = static_cast<chunk*>(tx.alloc(chunk_bytes));
                if (populate) { // best effort: without it the first stores fault the pages in
                    auto from = reinterpret_cast<std::uintptr_t>(k) & ~(page - 1);
                    auto to = (reinterpret_cast<std::uintptr_t>(k) + chunk_bytes + page - 1) &
                              ~(page - 1);
                    (void)::madvise(reinterpret_cast<void*>(from), to - from, MADV_POPULATE_WRITE);
                }
                std::memset(static_cast<void*>(k), 0, chunk_header_bytes);
                if (c.tail != nullptr) {
                    set_used(c.tail, static_cast<std::uint64_t>(c.at - chunk_data(c.tail)));
                    std::memcpy(static_cast<void*>(c.tail), &k, sizeof k); // tail->next = k
                } else {
                    c.head = k;
                }
                c.tail = k;
                c.at = chunk_data(k);
                c.end = c.at + cap;
                ++c.chunks;
            }
            std::uint8_t* at = c.at; // the record is generated here, in the chunk
            c.at += n;
            c.bytes += n;
            return at;
        });
        std::uint64_t chunks = 0;
        for (std::uint32_t p = 0; p < w.partitions; ++p) {
            cursor& c = cur[p];
            if (c.tail == nullptr)
                continue;
            set_used(c.tail, static_cast<std::uint64_t>(c.at - chunk_data(c.tail)));
            chunk_list& l = store.list(m, p);
            l.head = c.head;
            l.tail = c.tail;
            l.bytes = c.bytes;
            l.chunks = c.chunks;
            chunks += c.chunks;
        }
        store.mark_complete(m, s, chunks);
        gate.lock(); // released when write_task returns or throws (after the commit)
        return chunks;
    });
}

/// Runs map task m into the store. Private buffers with lazy allocation: write_task (one
/// transaction). Otherwise it stages each partition's records in volatile memory, whole records
/// per batch, and publishes a chunk's worth whenever a staging buffer would overflow; the final
/// transaction publishes the partly filled buffers and marks the task complete. Returns the
/// chunks it allocated.
inline std::uint64_t run_map_task(nv_store& store, std::uint32_t m) {
    if (store.task_transactions())
        return write_task(store, m);
    const workload& w = store.job();
    const std::size_t cap = store.chunk_capacity();
    std::vector<std::vector<std::uint8_t>> staging(w.partitions);
    std::uint64_t chunks = 0;
    if (!store.options().lazy && store.options().layout == buffer_layout::private_buffers)
        chunks += store.preallocate(m);
    map_summary s = run_map(w, m, [&](std::uint32_t p, const std::uint8_t* rec, std::size_t n) {
        std::vector<std::uint8_t>& b = staging[p];
        if (b.capacity() == 0)
            b.reserve(cap); // lazy in volatile memory too
        // A batch holds whole records, so that every chunk does (the reducers read records in
        // place, and a shared list interleaves the batches of all map tasks).
        if (b.size() + n > cap) {
            chunks += store.publish(m, p, b.data(), b.size());
            b.clear();
        }
        b.insert(b.end(), rec, rec + n);
    });
    // The commit of the map task. Private buffers with lazy allocation: the last partial
    // chunks and the complete flag in one transaction (their bytes are AALO, its log entry
    // stays small). Otherwise the partial batches may be logged (an older tail chunk), so
    // each goes in a transaction of its own to bound the log entry; the flag follows.
    const bool together =
        store.options().lazy && store.options().layout == buffer_layout::private_buffers;
    if (!together)
        for (std::uint32_t p = 0; p < w.partitions; ++p)
            if (!staging[p].empty()) {
                chunks += store.publish(m, p, staging[p].data(), staging[p].size());
                staging[p].clear();
            }
    tlptm::atomic(store.pool(), [&] {
        std::uint64_t fresh = 0;
        for (std::uint32_t p = 0; p < w.partitions; ++p)
            if (!staging[p].empty())
                fresh += store.publish(m, p, staging[p].data(), staging[p].size());
        store.mark_complete(m, s, chunks + fresh);
    });
    return store.entry(m).chunks.get();
}

} // namespace shuffle
