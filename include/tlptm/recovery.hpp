// tlptm — recovery: replay the committed log entries that the checkpoint does not cover.
#pragma once

#include <algorithm>
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

/// Two entries to replay that carry the same timestamp and write the same word (shared with
/// `tlptm check`). Commits of disjoint data may share a ts (the clock is read, not advanced,
/// at commit); two commits that write a word never do (the second locked the word's orec,
/// whose version was the first one's ts, and took a ts above it). So such a pair is
/// corruption. `todo` is sorted by timestamp; `pointer_base` decodes pool pointers. Calls
/// f(i, j, offset) for each such word (entries todo[i] and todo[j], i < j); returns how many.
template <class F>
std::size_t for_each_word_written_twice_at_one_ts(const std::vector<const entry_view*>& todo,
                                                  std::uint64_t pointer_base, F&& f) {
    std::size_t found = 0;
    std::vector<std::pair<std::uint64_t, std::size_t>> words; // offset, entry
    for (std::size_t a = 0; a < todo.size();) {
        std::size_t b = a + 1;
        while (b < todo.size() && todo[b]->ts == todo[a]->ts)
            ++b;
        if (b - a > 1) {
            words.clear();
            for (std::size_t i = a; i < b; ++i)
                decode_records(*todo[i], pointer_base,
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
inline std::vector<bool> refused_entries(const std::uint8_t* image, std::uint64_t pointer_base,
                                         const std::vector<const entry_view*>& todo,
                                         const std::vector<bool>& last) {
    std::vector<bool> refused(todo.size(), false);
    std::vector<pool_range> ranges;
    for (std::size_t i = 0; i < todo.size(); ++i) {
        const entry_view& e = *todo[i];
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
        while (later < todo.size() && todo[later]->ts == e.ts)
            ++later;
        for (std::size_t j = later; j < todo.size() && !explained; ++j)
            decode_records(*todo[j], pointer_base, [&](const log_record& r) {
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

    struct pending {
        std::uint64_t ts;
        std::uint32_t slot;
        std::size_t offset;
        entry_view entry;
        bool last = false;     ///< the ring's last valid entry
        bool committed = true; ///< false: refused (covered blocks do not match)
    };
    std::vector<pending> todo;
    for (auto& s : st.slots) {
        ++rep.rings_scanned;
        std::size_t last_at = ~std::size_t{0};
        std::uint64_t last_ts = s->ring.base_ts();
        std::size_t stop = s->ring.for_each_entry([&](const entry_view& e, std::size_t off) {
            ++rep.entries_valid;
            rep.log_bytes_scanned += e.length;
            last_at = off;
            last_ts = e.ts;
            if (e.ts > ct)
                todo.push_back(pending{e.ts, s->index, off, e});
        });
        if (!todo.empty() && todo.back().slot == s->index && todo.back().offset == last_at)
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
    std::sort(todo.begin(), todo.end(),
              [](const pending& a, const pending& b) { return a.ts < b.ts; });

    auto where = [&](const pending& p) {
        return "log entry ts " + std::to_string(p.ts) + " in ring " + std::to_string(p.slot) +
               " at offset " + std::to_string(p.offset);
    };
    const auto base = reinterpret_cast<std::uint64_t>(st.base); // decodes pool pointers
    // Validate everything first: recovery writes nothing unless every record is sound.
    for (std::size_t i = 0; i < todo.size(); ++i) {
        const pending& p = todo[i];
        if (p.ts > max_commit_ts)
            throw corruption_error("tlptm: pool '" + st.path + "': " + where(p) +
                                   ": timestamp beyond the largest one the library issues");
        bool ok = decode_records(p.entry, base, [&](const log_record& r) {
            if (!st.replayable(r.offset) || r.mask == 0)
                throw corruption_error("tlptm: pool '" + st.path + "': " + where(p) +
                                       ": record address offset " + std::to_string(r.offset) +
                                       " lies outside the pool's heap and metadata");
        });
        if (!ok)
            throw corruption_error("tlptm: pool '" + st.path + "': " + where(p) +
                                   ": malformed records");
        for_each_covered(p.entry, [&](const pool_range& r) {
            if (!st.in_heap(r.offset, r.size))
                throw corruption_error("tlptm: pool '" + st.path + "': " + where(p) +
                                       ": a block it covers (offset " + std::to_string(r.offset) +
                                       ", " + std::to_string(r.size) +
                                       " bytes) lies outside the pool's heap");
        });
    }

    std::vector<const entry_view*> views;
    std::vector<bool> last;
    for (const pending& p : todo) {
        views.push_back(&p.entry);
        last.push_back(p.last);
    }
    for_each_word_written_twice_at_one_ts(
        views, base, [&](std::size_t i, std::size_t, std::uint64_t offset) {
            throw corruption_error(
                "tlptm: pool '" + st.path + "': two log entries carry timestamp " +
                std::to_string(views[i]->ts) + " and both write offset " + std::to_string(offset));
        });
    const std::vector<bool> refused = refused_entries(st.base, base, views, last);
    for (std::size_t i = 0; i < todo.size(); ++i)
        if (refused[i]) {
            todo[i].committed = false;
            ++rep.entries_uncommitted;
        }

    persist_ctx& ctx = st.admin_ctx;
    std::vector<std::uint64_t>
        lines; // flushed after all stores: a flush covers earlier stores only
    for (const pending& p : todo) {
        if (!p.committed)
            continue;
        decode_records(p.entry, base, [&](const log_record& r) {
            std::uint64_t* w = st.word_at(r.offset);
            std::uint64_t old = __atomic_load_n(w, __ATOMIC_RELAXED);
            __atomic_store_n(w, (old & ~r.mask) | (r.value & r.mask), __ATOMIC_RELAXED);
            st.persist.stored(w, 8);
            lines.push_back(r.offset / cache_line);
            ++rep.records_replayed;
        });
        ++rep.entries_replayed;
    }
    std::sort(lines.begin(), lines.end());
    lines.erase(std::unique(lines.begin(), lines.end()), lines.end());
    for (std::uint64_t line : lines)
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
