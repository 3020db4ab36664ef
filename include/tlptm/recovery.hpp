// tlptm — recovery: replay the committed log entries that the checkpoint does not cover.
#pragma once

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <tlptm/detail/pool_state.hpp>
#include <tlptm/errors.hpp>
#include <tlptm/log.hpp>

namespace tlptm {

/// What one run of recovery found and did.
struct recovery_report {
    std::uint64_t checkpoint_before = 0; ///< persisted CT when recovery started
    std::uint64_t checkpoint_after = 0;  ///< persisted CT when it finished
    std::size_t rings_scanned = 0;       ///< log rings read (one per thread slot)
    std::size_t entries_valid = 0;       ///< entries that validated (any timestamp)
    std::size_t entries_replayed = 0;    ///< entries with ts > CT, replayed in ts order
    /// Entries with ts > CT not replayed: a ring's last entry whose covered blocks do not hold
    /// what they held at its commit (a crash before its fence completed), so not committed.
    std::size_t entries_uncommitted = 0;
    std::size_t records_replayed = 0;  ///< words written by the replay
    std::size_t log_bytes_scanned = 0; ///< bytes of valid entries read
    std::chrono::nanoseconds duration{0};
};

namespace detail {

/// The entry of a sequence element of the helpers below: a view, by pointer.
inline const entry_view& entry_of(const entry_view* e) noexcept {
    return *e;
}

/// An entry that recovery is to replay, as it keeps them: 40 bytes where a view and its
/// position took 88. With every ring of a default pool full (721 776 entries) the list is
/// 29 MB instead of 63; the 88-byte one, grown by doubling, spent more than half of the
/// whole recovery in its copies and first-touch page faults (docs/design.md, "Recovery in the
/// code").
struct pending_entry {
    const std::uint8_t* at = nullptr; ///< the entry's first byte, in its ring
    std::uint64_t ts = 0;
    std::uint64_t payload_size = 0;
    std::uint32_t payload_at = 0;   ///< the records start at `at + payload_at`
    std::uint32_t covered_size = 0; ///< the covered-blocks section ends where the records start
    std::uint32_t slot = 0;
    entry_format format{};
    bool last = false;     ///< the ring's last valid entry
    bool committed = true; ///< false: refused (covered blocks do not match)

    pending_entry() = default;
    /// Entry `e` of ring `s`, which begins at `entry`.
    pending_entry(const entry_view& e, const std::uint8_t* entry, std::uint32_t s) noexcept
        : at(entry), ts(e.ts), payload_size(e.payload_size),
          payload_at(static_cast<std::uint32_t>(e.payload - entry)),
          covered_size(static_cast<std::uint32_t>(e.covered_size)), slot(s), format(e.format) {}

    entry_view view() const noexcept {
        entry_view e;
        e.ts = ts;
        e.format = format;
        e.length = payload_at + payload_size;
        e.payload = at + payload_at;
        e.payload_size = payload_size;
        e.covered = covered_size != 0 ? e.payload - covered_size : nullptr;
        e.covered_size = covered_size;
        return e;
    }
};

inline entry_view entry_of(const pending_entry& p) noexcept {
    return p.view();
}

/// The distinct cache lines that recovery's replay wrote: an open-addressing hash set, so that
/// replaying many records into few lines flushes each once without sorting a list of them all
/// (with every ring of a default pool full, sorting 2.9 million line numbers took about a
/// tenth of the recovery).
class line_set {
public:
    void insert(std::uint64_t line) {
        if (line == last_)
            return; // the common repeat: words of one record run, or of one line
        last_ = line;
        if (2 * (count_ + 1) > slots_.size())
            grow();
        if (place(line))
            ++count_;
    }

    /// The lines, ascending (the msync path merges adjacent pages; CLWB takes any order).
    std::vector<std::uint64_t> sorted() const {
        std::vector<std::uint64_t> out;
        out.reserve(count_);
        for (std::uint64_t l : slots_)
            if (l != empty)
                out.push_back(l);
        std::sort(out.begin(), out.end());
        return out;
    }

private:
    static constexpr std::uint64_t empty = ~std::uint64_t{0}; // no line number is this large
    bool place(std::uint64_t line) noexcept {
        const std::size_t mask = slots_.size() - 1;
        for (std::size_t i = (line * 0x9E3779B97F4A7C15ull) >> shift_;; i = (i + 1) & mask) {
            if (slots_[i] == line)
                return false;
            if (slots_[i] == empty) {
                slots_[i] = line;
                return true;
            }
        }
    }
    void grow() {
        std::vector<std::uint64_t> old(slots_.size() < 64 ? 64 : 2 * slots_.size(), empty);
        old.swap(slots_);
        shift_ = static_cast<unsigned>(64 - std::countr_zero(slots_.size()));
        for (std::uint64_t l : old)
            if (l != empty)
                place(l);
    }
    std::vector<std::uint64_t> slots_;
    std::size_t count_ = 0;
    unsigned shift_ = 64;
    std::uint64_t last_ = empty;
};

/// Two entries to replay that carry the same timestamp and write the same word (shared with
/// `tlptm check`). Commits of disjoint data may share a ts (the clock is read, not advanced,
/// at commit); two commits that write a word never do (the second locked the word's orec,
/// whose version was the first one's ts, and took a ts above it). So such a pair is
/// corruption. `todo` is sorted by timestamp (a vector of `const entry_view*`, or recovery's
/// pending entries: entry_of(todo[i]) is the entry); `pointer_base` decodes pool pointers. Calls
/// f(i, j, offset) for each such word (entries todo[i] and todo[j], i < j); returns how many.
template <class Entries, class F>
std::size_t for_each_word_written_twice_at_one_ts(const Entries& todo, std::uint64_t pointer_base,
                                                  F&& f) {
    std::size_t found = 0;
    std::vector<std::pair<std::uint64_t, std::size_t>> words; // offset, entry
    for (std::size_t a = 0; a < todo.size();) {
        std::size_t b = a + 1;
        while (b < todo.size() && entry_of(todo[b]).ts == entry_of(todo[a]).ts)
            ++b;
        if (b - a > 1) {
            words.clear();
            for (std::size_t i = a; i < b; ++i)
                decode_records(entry_of(todo[i]), pointer_base,
                               [&](const log_record& r) { words.emplace_back(r.offset, i); });
            std::sort(words.begin(), words.end());
            for (std::size_t k = 1; k < words.size(); ++k)
                if (words[k].first == words[k - 1].first &&
                    words[k].second != words[k - 1].second) {
                    f(words[k - 1].second, words[k].second, words[k].first);
                    ++found;
                }
        }
        a = b;
    }
    return found;
}

/// I4, recovery's rule for covered blocks (shared with `tlptm check`): of the entries to replay
/// (`todo`, sorted by timestamp; `last[i]`: entry i is its ring's last valid entry), which ones
/// are refused as never committed. An entry that covers the blocks its transaction allocated
/// counts only if they hold what they held at its commit (their CRC is in the entry), read at
/// `image`. Only a ring's last entry can fail that after a crash: the ring's next entry is
/// written after this one's fence, which completed the blocks' flushes. A mismatch that a
/// later entry (a larger ts) explains (it writes into one of the blocks, so its transaction
/// saw them published, after this one committed, and then wrote back in place) is not a crash; any
/// other means the fence never completed: the transaction did not commit (its `atomic` never
/// returned) and none of its stores is replayed. `pointer_base` decodes pool pointers in the
/// records (the pool's base address).
template <class Entries>
std::vector<bool> refused_entries(const std::uint8_t* image, std::uint64_t pointer_base,
                                  const Entries& todo, const std::vector<bool>& last) {
    std::vector<bool> refused(todo.size(), false);
    std::vector<pool_range> ranges;
    for (std::size_t i = 0; i < todo.size(); ++i) {
        const entry_view e = entry_of(todo[i]);
        if (!last[i] || !e.covered)
            continue;
        ranges.clear();
        std::uint32_t want = for_each_covered(e, [&](const pool_range& r) { ranges.push_back(r); });
        if (covered_blocks_crc(image, ranges) == want)
            continue;
        auto inside = [&](std::uint64_t off) {
            auto it =
                std::upper_bound(ranges.begin(), ranges.end(), off,
                                 [](std::uint64_t o, const pool_range& r) { return o < r.offset; });
            return it != ranges.begin() && off - std::prev(it)->offset < std::prev(it)->size;
        };
        bool explained = false;
        std::size_t later = i + 1;
        while (later < todo.size() && entry_of(todo[later]).ts == e.ts)
            ++later;
        for (std::size_t j = later; j < todo.size() && !explained; ++j)
            decode_records(entry_of(todo[j]), pointer_base, [&](const log_record& r) {
                explained = explained || inside(r.offset) || inside(r.offset + 7);
            });
        refused[i] = !explained;
    }
    return refused;
}

/// Recovery proper (I2, I5). Must run with no transaction in flight (at open, or inside an
/// exclusive section). Collects the valid
/// entries of every ring, validates every record of those to replay before writing anything
/// (an address outside the heap or metadata area throws corruption_error and leaves the pool
/// untouched), replays them in timestamp order, makes the data durable, then advances the
/// persisted CT past them. Idempotent: a crash before CT is persisted replays the same entries
/// again to the same result.
inline recovery_report run_recovery(pool_state& st) {
    auto t0 = std::chrono::steady_clock::now();
    recovery_report rep;
    // No transaction runs: the header word is what the file holds, durable by definition.
    std::uint64_t ct = __atomic_load_n(&st.header->checkpoint_ts, __ATOMIC_ACQUIRE);
    rep.checkpoint_before = ct;

    // The entries to replay are counted first, so that their list is allocated once and its
    // pages mapped in one system call: grown by doubling, its copies and first-touch page
    // faults took longer than parsing the log twice (docs/design.md, "Recovery in the code").
    std::size_t to_replay = 0;
    for (auto& s : st.slots) {
        // With pool_options::populate, the ring's pages are mapped ahead of the scan in growing
        // steps, a system call each, rather than a page fault each on first read (4 KiB of log
        // per fault, which cost more than parsing the entries in it). Only where entries
        // reach: a ring with none (a fresh pool's) is not touched past its first entry's
        // place, and a sparse file stays sparse beyond a step past the log.
        std::size_t mapped = 0;
        s->ring.for_each_entry([&](const entry_view& e, std::size_t off) {
            to_replay += e.ts > ct;
            if (st.populate_on_use && off + e.length + 4096 > mapped &&
                mapped < s->ring.capacity()) {
                const std::size_t step =
                    std::min(std::max<std::size_t>(mapped, 64 << 10), s->ring.capacity() - mapped);
                populate_pages(s->ring.data() + mapped, step, MADV_POPULATE_READ);
                mapped += step;
            }
        });
    }
    std::vector<pending_entry> todo;
    todo.reserve(to_replay);
    populate_pages(todo.data(), to_replay * sizeof(pending_entry), MADV_POPULATE_WRITE);
    for (auto& s : st.slots) {
        ++rep.rings_scanned;
        const std::size_t first = todo.size();
        std::size_t last_at = ~std::size_t{0};
        std::uint64_t last_ts = s->ring.base_ts();
        std::size_t stop = s->ring.for_each_entry([&](const entry_view& e, std::size_t off) {
            ++rep.entries_valid;
            rep.log_bytes_scanned += e.length;
            last_at = off;
            last_ts = e.ts;
            if (e.ts > ct)
                todo.emplace_back(e, s->ring.data() + off, s->index);
        });
        if (todo.size() > first && todo.back().at == s->ring.data() + last_at)
            todo.back().last = true;
        // A damaged entry with committed ones behind it is no torn tail: replaying up to it
        // would lose them, so recovery refuses (and writes nothing).
        s->ring.for_each_entry_after_damage(
            stop, last_ts, [&](const entry_view& e, std::size_t off) {
                if (e.ts > ct)
                    throw corruption_error(
                        "tlptm: pool '" + st.path + "': ring " + std::to_string(s->index) +
                        ": the log entry at offset " + std::to_string(stop) +
                        " fails its checksum, yet a valid entry follows it (ts " +
                        std::to_string(e.ts) + " at offset " + std::to_string(off) +
                        "): the log was damaged after it was written, and recovery would lose "
                        "committed transactions");
            });
    }
    // Entries of one timestamp write disjoint words (checked below), so their order is free.
    std::sort(todo.begin(), todo.end(),
              [](const pending_entry& a, const pending_entry& b) { return a.ts < b.ts; });

    auto where = [&](const pending_entry& p) {
        return "log entry ts " + std::to_string(p.ts) + " in ring " + std::to_string(p.slot) +
               " at offset " + std::to_string(p.at - st.slots[p.slot]->ring.data());
    };
    const auto base = reinterpret_cast<std::uint64_t>(st.base); // decodes pool pointers
    // Validate everything first: recovery writes nothing unless every record is sound.
    for (std::size_t i = 0; i < todo.size(); ++i) {
        const pending_entry& p = todo[i];
        if (p.ts > max_commit_ts)
            throw corruption_error("tlptm: pool '" + st.path + "': " + where(p) +
                                   ": timestamp beyond the largest one the library issues");
        const entry_view e = p.view();
        bool ok = decode_records(e, base, [&](const log_record& r) {
            if (!st.replayable(r.offset) || r.mask == 0)
                throw corruption_error("tlptm: pool '" + st.path + "': " + where(p) +
                                       ": record address offset " + std::to_string(r.offset) +
                                       " lies outside the pool's heap and metadata");
        });
        if (!ok)
            throw corruption_error("tlptm: pool '" + st.path + "': " + where(p) +
                                   ": malformed records");
        for_each_covered(e, [&](const pool_range& r) {
            if (!st.in_heap(r.offset, r.size))
                throw corruption_error("tlptm: pool '" + st.path + "': " + where(p) +
                                       ": a block it covers (offset " + std::to_string(r.offset) +
                                       ", " + std::to_string(r.size) +
                                       " bytes) lies outside the pool's heap");
        });
    }

    for_each_word_written_twice_at_one_ts(
        todo, base, [&](std::size_t i, std::size_t, std::uint64_t offset) {
            throw corruption_error(
                "tlptm: pool '" + st.path + "': two log entries carry timestamp " +
                std::to_string(todo[i].ts) + " and both write offset " + std::to_string(offset));
        });
    std::vector<bool> last(todo.size());
    for (std::size_t i = 0; i < todo.size(); ++i)
        last[i] = todo[i].last;
    const std::vector<bool> refused = refused_entries(st.base, base, todo, last);
    for (std::size_t i = 0; i < todo.size(); ++i)
        if (refused[i]) {
            todo[i].committed = false;
            ++rep.entries_uncommitted;
        }

    persist_ctx& ctx = st.admin_ctx;
    line_set lines; // flushed after all stores: a flush covers earlier stores only
    for (std::size_t i = 0; i < todo.size(); ++i) {
        const pending_entry& p = todo[i];
        if (!p.committed)
            continue;
        decode_records(p.view(), base, [&](const log_record& r) {
            std::uint64_t* w = st.word_at(r.offset);
            std::uint64_t old = __atomic_load_n(w, __ATOMIC_RELAXED);
            __atomic_store_n(w, (old & ~r.mask) | (r.value & r.mask), __ATOMIC_RELAXED);
            st.persist.stored(w, 8);
            lines.insert(r.offset / cache_line);
            ++rep.records_replayed;
        });
        ++rep.entries_replayed;
    }
    for (std::uint64_t line : lines.sorted())
        st.persist.flush(ctx, st.base + line * cache_line, cache_line);
    if (!todo.empty()) {
        // The replayed data is durable before CT says so (I2). CT also passes the entries
        // found uncommitted, so that they are never considered again and no new transaction
        // takes their timestamps.
        st.persist.fence(ctx);
        st.persist.persist_word(ctx, &st.header->checkpoint_ts, todo.back().ts);
    }
    st.publish_recovered_checkpoint();
    rep.checkpoint_after = st.durable_checkpoint();
    // Every valid entry now has ts <= CT; new timestamps start above.
    if (st.clock.load() < rep.checkpoint_after)
        st.clock.store(rep.checkpoint_after);
    // The allocator's volatile state follows from the replayed descriptors and bitmaps. Frees
    // still waiting for I3 are covered now: CT passed them and no transaction runs.
    st.allocator.rebuild(st.base, *st.header, st.path);
    rep.duration = std::chrono::steady_clock::now() - t0;
    return rep;
}

} // namespace detail
} // namespace tlptm
