// Crash-consistency harness: the pool images that x86 persistency allows after a crash.
//
// crash_images replays a trace (tracer.hpp) from the pool file's initial bytes and keeps, per
// cache line, what is known to be persisted and what may or may not be:
//
// - Ordinary stores (stored()): each call takes a snapshot of the lines it touches. A line
//   persists in store order, so after a crash it holds a *prefix* of its snapshots since the
//   last point where it was known persisted: the durable content, or any later snapshot.
//   Hardware writes back whole lines; only aligned 8-byte stores are single-copy atomic, and
//   the snapshot granularity (one per stored() call) is what the library announces.
// - flush(): captures the line as of the flush (the snapshot count). The calling thread's next
//   fence makes that snapshot (and every earlier one) durable; later snapshots stay uncertain.
// - Non-temporal stores (stream()): each aligned 8-byte unit they touch persists on its own, in
//   any combination, until the calling thread's next fence makes all of them durable.
// - fence(): completes the calling thread's flushes and streams only (SFENCE is per core).
//
// Crash points are the positions before every flush and fence, and after every fence, at which
// something changed since the previous point (a store, a stream, a fence that made something
// durable, or a returned transaction), and the end of the trace. A point right after a flush
// adds nothing: until a fence completes it, the flush allows exactly the images that were
// already possible.
//
// Per point, every combination of the uncertain lines and units is an image. If there are more
// than `exhaustive_limit` combinations, a sample is taken that always contains: nothing
// persisted, everything persisted, each single item alone persisted and each single item alone
// lost (most recent first: "only the last unit persisted" is among them), time prefixes
// (everything written up to an instant persisted, nothing after), and random combinations.
//
// Mutations (tests of the harness itself) are applied while replaying: a dropped flush or fence
// is treated as if the library had never issued it; zero_crc clears the four CRC bytes of a
// streamed log entry.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include <tlptm/tlptm.hpp>

#include "tracer.hpp"

namespace tlptm_harness {

using line_bytes = std::array<std::uint8_t, line_size>;

inline std::uint64_t mix64(std::uint64_t x) noexcept {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

/// Hash of line `line` holding `p` (64 bytes); images hash as the sum over their lines.
inline std::uint64_t hash_line(std::uint64_t line, const std::uint8_t* p) noexcept {
    std::uint64_t h = mix64(line * 0x9E3779B97F4A7C15ull + 1);
    for (std::size_t i = 0; i < line_size; i += 8) {
        std::uint64_t w;
        std::memcpy(&w, p + i, 8);
        h = mix64(h ^ w) + i;
    }
    return h;
}

// ---- roles of flushes and fences in the commit protocol ---------------------------------------

enum class role : std::uint8_t {
    none,              ///< a store or a marker
    entry,             ///< stream() into a ring: a log entry
    aalo_stream,       ///< stream() into the data area: a covered block written in place (I4)
    other_stream,      ///< stream() anywhere else
    f1,                ///< fence with an entry pending (streamed or flushed): a commit point (§4)
    f2,                ///< the thread's next fence after its F1: the entry is applied
    fence,             ///< any other fence (CT, ring header, recovery, creation)
    aalo_flush,        ///< heap / metadata flush before a commit's stream (AALO lines, I4)
    write_back_flush,  ///< heap / metadata flush between F1 and F2 (written-back data)
    replay_flush,      ///< heap / metadata flush by recovery
    ring_header_flush, ///< flush of a ring's header line (generation, base_ts)
    entry_flush,       ///< flush of a ring's data: a log entry written with stores (log_write)
    ct_flush,          ///< flush of the header line that holds CT
    other_flush,       ///< any other flush (header at creation, root descriptor)
};

inline const char* to_string(role r) {
    switch (r) {
    case role::none:
        return "store";
    case role::entry:
        return "log entry stream";
    case role::aalo_stream:
        return "AALO stream";
    case role::other_stream:
        return "stream";
    case role::f1:
        return "F1";
    case role::f2:
        return "F2";
    case role::fence:
        return "fence";
    case role::aalo_flush:
        return "AALO flush";
    case role::write_back_flush:
        return "write-back flush";
    case role::replay_flush:
        return "replay flush";
    case role::ring_header_flush:
        return "ring header flush";
    case role::entry_flush:
        return "log entry flush";
    case role::ct_flush:
        return "CT flush";
    case role::other_flush:
        return "flush";
    }
    return "?";
}

/// The role of every event of `t`. `recovery`: the trace is of recovery (heap flushes replay).
inline std::vector<role> classify(const trace& t, const pool_layout& l, bool recovery) {
    std::vector<role> r(t.events.size(), role::none);
    std::vector<char> streamed, after_f1;
    for (std::size_t i = 0; i < t.events.size(); ++i) {
        const event& e = t.events[i];
        if (e.thread >= streamed.size()) {
            streamed.resize(e.thread + 1u, 0);
            after_f1.resize(e.thread + 1u, 0);
        }
        switch (e.kind) {
        case event_kind::stream:
            streamed[e.thread] = 1;
            r[i] = l.ring_data(e.offset)              ? role::entry
                   : l.in_data(e.offset) && !recovery ? role::aalo_stream
                                                      : role::other_stream;
            break;
        case event_kind::fence:
            if (streamed[e.thread]) {
                r[i] = role::f1;
                after_f1[e.thread] = 1;
                streamed[e.thread] = 0;
            } else {
                r[i] = after_f1[e.thread] ? role::f2 : role::fence;
                after_f1[e.thread] = 0;
            }
            break;
        case event_kind::flush:
            if (e.offset / line_size == pool_layout::ct_offset / line_size)
                r[i] = role::ct_flush;
            else if (l.ring_header(e.offset))
                r[i] = role::ring_header_flush;
            else if (l.ring_data(e.offset)) { // an entry written with stores: like a stream
                r[i] = role::entry_flush;
                streamed[e.thread] = 1;
            } else if (l.in_data(e.offset))
                r[i] = recovery             ? role::replay_flush
                       : after_f1[e.thread] ? role::write_back_flush
                                            : role::aalo_flush;
            else
                r[i] = role::other_flush;
            break;
        default:
            break;
        }
    }
    return r;
}

// ---- mutations --------------------------------------------------------------------------------

/// A deliberate defect of the persistence path, applied when the trace is replayed.
struct mutation {
    enum class kind : std::uint8_t { none, drop_flush, drop_stream, drop_fence, zero_crc };
    kind what = kind::none;
    role target = role::none; ///< drop_*: the role of the dropped event
    int occurrence = 0;       ///< among events of that role (zero_crc: entries); < 0: from the end
    bool every = false;       ///< every event of that role

    static mutation drop_flush(role r, int occurrence) {
        return {kind::drop_flush, r, occurrence, false};
    }
    static mutation drop_stream(role r, int occurrence) {
        return {kind::drop_stream, r, occurrence, false};
    }
    static mutation drop_fence(role r, int occurrence) {
        return {kind::drop_fence, r, occurrence, false};
    }
    static mutation zero_crc_of_every_entry() { return {kind::zero_crc, role::entry, 0, true}; }

    std::string describe() const {
        if (what == kind::none)
            return "none";
        std::string s = what == kind::zero_crc ? "zero the CRC of " : "drop ";
        if (every)
            return s + "every " + to_string(target);
        return s + to_string(target) + " #" + std::to_string(occurrence);
    }
};

/// The events `m` applies to (sorted); empty if it matches none.
inline std::vector<std::size_t> mutated_events(const std::vector<role>& roles, const mutation& m) {
    std::vector<std::size_t> all;
    if (m.what == mutation::kind::none)
        return all;
    role want = m.what == mutation::kind::zero_crc ? role::entry : m.target;
    for (std::size_t i = 0; i < roles.size(); ++i)
        if (roles[i] == want)
            all.push_back(i);
    if (m.every)
        return all;
    long n = static_cast<long>(all.size());
    long k = m.occurrence < 0 ? n + m.occurrence : m.occurrence;
    if (k < 0 || k >= n)
        return {};
    return {all[static_cast<std::size_t>(k)]};
}

/// Zeroes the CRC field of the log entry in `e` (n bytes), as docs/log-format.md places it.
inline void zero_entry_crc(std::uint8_t* e, std::size_t n) {
    std::size_t crc_at = 0;
    if (n >= 16 && e[0] == 1) {
        crc_at = 12;
    } else if (n >= 1 && e[0] == 2) {
        const std::uint8_t* p = e + 1;
        std::uint64_t v;
        for (int k = 0; k < 2; ++k) {
            std::size_t used = tlptm::codec::get_varint(p, e + n, v);
            if (used == 0)
                return;
            p += used;
        }
        crc_at = static_cast<std::size_t>(p - e);
    } else {
        return;
    }
    if (crc_at + 4 <= n)
        std::memset(e + crc_at, 0, 4);
}

// ---- the generator ----------------------------------------------------------------------------

/// How many images a crash point gets.
struct image_budget {
    /// Enumerate every combination when there are at most this many.
    std::uint64_t exhaustive_limit = 256;
    /// Items tried alone persisted and alone lost, most recent first.
    std::size_t singles = 32;
    /// Time prefixes (everything written up to an instant persisted).
    std::size_t time_prefixes = 32;
    /// Random combinations.
    std::size_t random = 8;
    std::uint64_t seed = 1;
};

/// A crash point: where in the trace, and which transactions had begun and returned.
struct crash_point {
    std::size_t index = 0; ///< number of events before the crash
    std::string where;
    std::vector<std::uint32_t> begun, returned; ///< per tracer thread
    std::uint32_t returned_count(std::size_t thread) const {
        return thread < returned.size() ? returned[thread] : 0;
    }
    std::uint32_t begun_count(std::size_t thread) const {
        return thread < begun.size() ? begun[thread] : 0;
    }
};

/// One uncertain line (ordinary stores) or 8-byte unit (non-temporal stores) at a crash point.
struct uncertain_item {
    bool nt = false;
    std::uint64_t where = 0;         ///< line index, or unit offset
    std::vector<std::uint64_t> seqs; ///< when each of its pending writes happened
    std::uint32_t levels() const noexcept { return static_cast<std::uint32_t>(seqs.size() + 1); }
};

/// An image: the durable image with some lines replaced.
struct image_patch {
    std::vector<std::pair<std::uint64_t, line_bytes>> lines; ///< line index, content; sorted
    std::uint64_t hash = 0;                                  ///< of the whole image

    const line_bytes* find(std::uint64_t line) const {
        auto it = std::lower_bound(lines.begin(), lines.end(), line,
                                   [](const auto& a, std::uint64_t l) { return a.first < l; });
        return it != lines.end() && it->first == line ? &it->second : nullptr;
    }
};

class crash_images {
public:
    /// `initial`: the pool file's bytes when the trace began.
    crash_images(const trace& t, std::vector<std::uint8_t> initial, const pool_layout& layout,
                 const mutation& mut, bool recovery_trace, image_budget budget)
        : t_(t), layout_(layout), budget_(budget), dur_(std::move(initial)) {
        roles_ = classify(t, layout, recovery_trace);
        mutated_ = mutated_events(roles_, mut);
        mut_kind_ = mut.what;
        std::size_t nlines = (dur_.size() + line_size - 1) / line_size;
        lines_.resize(nlines);
        line_hash_.resize(nlines);
        for (std::size_t l = 0; l < nlines; ++l) {
            line_hash_[l] = hash_line(l, dur_.data() + l * line_size);
            dur_hash_ += line_hash_[l];
        }
    }

    const std::vector<role>& roles() const noexcept { return roles_; }
    /// The events the mutation applies to (empty: it matched nothing).
    const std::vector<std::size_t>& mutated() const noexcept { return mutated_; }

    /// What is certainly persisted at the current point.
    const std::vector<std::uint8_t>& durable() const noexcept { return dur_; }
    std::uint64_t durable_line_hash(std::uint64_t line) const { return line_hash_[line]; }
    std::uint64_t durable_hash() const noexcept { return dur_hash_; }

    /// The uncertain items of the current point and one image's choice (level per item).
    const std::vector<uncertain_item>& items() const noexcept { return items_; }

    std::size_t points() const noexcept { return points_; }
    std::size_t images() const noexcept { return images_; }
    /// Points whose combinations were sampled rather than enumerated.
    std::size_t sampled_points() const noexcept { return sampled_points_; }

    /// Describes an image of the current point: which uncertain items persisted.
    std::string describe(const std::vector<std::uint32_t>& level) const {
        std::string kept, lost;
        std::size_t nk = 0, nl = 0;
        for (std::size_t i = 0; i < items_.size(); ++i) {
            const uncertain_item& it = items_[i];
            std::string name = it.nt ? "unit " + hex(it.where) + " (" + layout_.area(it.where) + ")"
                                     : "line " + hex(it.where * line_size) + " (" +
                                           layout_.area(it.where * line_size) + ")";
            if (it.levels() > 2)
                name += " " + std::to_string(level[i]) + "/" + std::to_string(it.levels() - 1);
            std::string& dst = level[i] == 0 ? lost : kept;
            std::size_t& n = level[i] == 0 ? nl : nk;
            if (n++ < 6)
                dst += (dst.empty() ? "" : ", ") + name;
        }
        auto more = [](std::size_t n) {
            return n > 6 ? " and " + std::to_string(n - 6) + " more" : std::string();
        };
        return "persisted {" + kept + more(nk) + "}, not persisted {" + lost + more(nl) + "}";
    }

    /// Replays the trace; calls on_image(point, patch, level) for every image of every crash
    /// point (patches are relative to durable() as it is during the call). on_image returns
    /// false to skip the rest of that point's images.
    template <class F> void run(F&& on_image) {
        std::size_t next_mut = 0;
        for (std::size_t i = 0; i < t_.events.size(); ++i) {
            const event& e = t_.events[i];
            bool dropped = next_mut < mutated_.size() && mutated_[next_mut] == i &&
                           mut_kind_ != mutation::kind::zero_crc;
            bool crc = next_mut < mutated_.size() && mutated_[next_mut] == i &&
                       mut_kind_ == mutation::kind::zero_crc;
            if (next_mut < mutated_.size() && mutated_[next_mut] == i)
                ++next_mut;
            if (dropped)
                continue;
            ensure_thread(e.thread);
            switch (e.kind) {
            case event_kind::store:
                apply_store(e);
                dirty_ = true;
                break;
            case event_kind::stream:
                apply_stream(e, crc);
                dirty_ = true;
                break;
            case event_kind::flush:
                if (dirty_)
                    emit(i, "before", on_image);
                apply_flush(e);
                break;
            case event_kind::fence:
                if (dirty_)
                    emit(i, "before", on_image);
                if (apply_fence(e)) {
                    dirty_ = true;
                    emit(i + 1, "after", on_image);
                }
                break;
            case event_kind::tx_begin:
                ++begun_[e.thread];
                current_tx_[e.thread] = static_cast<std::int64_t>(e.tx);
                break;
            case event_kind::tx_end:
                ++returned_[e.thread];
                current_tx_[e.thread] = -1;
                dirty_ = true;
                break;
            case event_kind::fault: // the fence or flush threw: it made nothing durable
                break;
            }
        }
        if (dirty_)
            emit(t_.events.size(), "end", on_image);
    }

private:
    struct line_state {
        std::uint64_t base_seq = 0;     ///< absolute index of the durable content
        std::vector<line_bytes> snaps;  ///< snaps[k]: absolute index base_seq + 1 + k
        std::vector<std::uint64_t> seq; ///< when each snapshot was taken
    };
    struct nt_write {
        std::uint8_t at = 0, n = 0;
        std::array<std::uint8_t, 8> bytes{};
        std::uint64_t seq = 0;
    };
    struct nt_unit {
        std::uint16_t thread = 0;
        std::vector<nt_write> writes;
    };

    void ensure_thread(std::uint16_t t) {
        if (t >= marks_.size()) {
            marks_.resize(t + 1u);
            begun_.resize(t + 1u, 0);
            returned_.resize(t + 1u, 0);
            current_tx_.resize(t + 1u, -1);
        }
    }

    void set_durable_line(std::uint64_t line, const std::uint8_t* content) {
        std::memcpy(dur_.data() + line * line_size, content, line_size);
        dur_hash_ -= line_hash_[line];
        line_hash_[line] = hash_line(line, dur_.data() + line * line_size);
        dur_hash_ += line_hash_[line];
    }

    void apply_store(const event& e) {
        const std::uint8_t* data = t_.data_of(e);
        for (std::uint64_t o = e.offset; o < e.offset + e.size;) {
            std::uint64_t line = o / line_size;
            std::uint64_t end = std::min(e.offset + e.size, (line + 1) * line_size);
            line_state& ls = lines_[line];
            line_bytes c;
            if (ls.snaps.empty())
                std::memcpy(c.data(), dur_.data() + line * line_size, line_size);
            else
                c = ls.snaps.back();
            std::memcpy(c.data() + (o - line * line_size), data + (o - e.offset), end - o);
            ls.snaps.push_back(c);
            ls.seq.push_back(++seq_);
            active_.insert(line);
            o = end;
        }
    }

    void apply_stream(const event& e, bool zero_crc) {
        std::vector<std::uint8_t> data(t_.data_of(e), t_.data_of(e) + e.size);
        if (zero_crc)
            zero_entry_crc(data.data(), data.size());
        for (std::uint64_t o = e.offset; o < e.offset + e.size;) {
            std::uint64_t unit = o & ~std::uint64_t{7};
            std::uint64_t end = std::min(e.offset + e.size, unit + 8);
            nt_write w;
            w.at = static_cast<std::uint8_t>(o - unit);
            w.n = static_cast<std::uint8_t>(end - o);
            std::memcpy(w.bytes.data(), data.data() + (o - e.offset), end - o);
            w.seq = ++seq_;
            nt_unit& u = nt_[unit];
            if (u.writes.empty())
                u.thread = e.thread;
            u.writes.push_back(w);
            o = end;
        }
    }

    void apply_flush(const event& e) {
        auto& marks = marks_[e.thread];
        for (std::uint64_t line = e.offset / line_size; line * line_size < e.offset + e.size;
             ++line) {
            const line_state& ls = lines_[line];
            std::uint64_t mark = ls.base_seq + ls.snaps.size();
            auto [it, fresh] = marks.try_emplace(line, mark);
            if (!fresh)
                it->second = std::max(it->second, mark);
        }
    }

    /// Completes the thread's flushes and streams; true if anything became durable.
    bool apply_fence(const event& e) {
        bool changed = false;
        auto& marks = marks_[e.thread];
        for (auto [line, mark] : marks) {
            line_state& ls = lines_[line];
            if (mark <= ls.base_seq)
                continue;
            std::size_t k = mark - ls.base_seq;
            set_durable_line(line, ls.snaps[k - 1].data());
            ls.snaps.erase(ls.snaps.begin(), ls.snaps.begin() + static_cast<std::ptrdiff_t>(k));
            ls.seq.erase(ls.seq.begin(), ls.seq.begin() + static_cast<std::ptrdiff_t>(k));
            ls.base_seq = mark;
            if (ls.snaps.empty())
                active_.erase(line);
            changed = true;
        }
        marks.clear();
        for (auto it = nt_.begin(); it != nt_.end();) {
            if (it->second.thread != e.thread) {
                ++it;
                continue;
            }
            std::uint64_t unit = it->first, line = unit / line_size;
            line_bytes c;
            std::memcpy(c.data(), dur_.data() + line * line_size, line_size);
            for (const nt_write& w : it->second.writes) {
                std::memcpy(c.data() + (unit % line_size) + w.at, w.bytes.data(), w.n);
                // Pending ordinary snapshots of the line were taken without these bytes; once
                // durable, they are in the line whatever else persists.
                for (line_bytes& s : lines_[line].snaps)
                    std::memcpy(s.data() + (unit % line_size) + w.at, w.bytes.data(), w.n);
            }
            set_durable_line(line, c.data());
            it = nt_.erase(it);
            changed = true;
        }
        return changed;
    }

    std::string where(std::size_t index, const char* when) const {
        std::string s = when;
        if (index < t_.events.size() || std::string(when) == "after") {
            std::size_t ev = std::string(when) == "after" ? index - 1 : index;
            const event& e = t_.events[ev];
            s += std::string(" ") + to_string(roles_[ev]) + " (event " + std::to_string(ev) +
                 ", thread " + std::to_string(e.thread);
            if (current_tx_[e.thread] >= 0)
                s += ", in tx " + std::to_string(current_tx_[e.thread]);
            s += ")";
        } else {
            s += " of the trace";
        }
        return s;
    }

    template <class F> void emit(std::size_t index, const char* when, F& on_image) {
        dirty_ = false;
        ++points_;
        crash_point p;
        p.index = index;
        p.where = where(index, when);
        p.begun = begun_;
        p.returned = returned_;

        items_.clear();
        for (std::uint64_t line : active_) {
            uncertain_item it;
            it.where = line;
            it.seqs = lines_[line].seq;
            items_.push_back(std::move(it));
        }
        for (const auto& [unit, u] : nt_) {
            uncertain_item it;
            it.nt = true;
            it.where = unit;
            for (const nt_write& w : u.writes)
                it.seqs.push_back(w.seq);
            items_.push_back(std::move(it));
        }

        std::vector<std::vector<std::uint32_t>> choices = choose(index);
        std::unordered_set<std::uint64_t> seen;
        image_patch patch;
        for (const auto& level : choices) {
            build(level, patch);
            if (!seen.insert(patch.hash).second)
                continue;
            ++images_;
            if (!on_image(p, patch, level))
                break;
        }
    }

    std::vector<std::vector<std::uint32_t>> choose(std::size_t index) {
        const std::size_t n = items_.size();
        std::vector<std::vector<std::uint32_t>> out;
        std::uint64_t total = 1;
        for (const auto& it : items_) {
            total *= it.levels();
            if (total > budget_.exhaustive_limit)
                break;
        }
        std::vector<std::uint32_t> none(n, 0), all(n);
        for (std::size_t i = 0; i < n; ++i)
            all[i] = items_[i].levels() - 1;
        if (total <= budget_.exhaustive_limit) {
            std::vector<std::uint32_t> v(n, 0);
            for (;;) {
                out.push_back(v);
                std::size_t k = 0;
                while (k < n && ++v[k] == items_[k].levels())
                    v[k++] = 0;
                if (k == n)
                    break;
            }
            return out;
        }
        ++sampled_points_;
        out.push_back(none);
        out.push_back(all);
        // Most recently written first: "only the last unit persisted" comes early.
        std::vector<std::size_t> order(n);
        for (std::size_t i = 0; i < n; ++i)
            order[i] = i;
        std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
            return items_[a].seqs.back() > items_[b].seqs.back();
        });
        for (std::size_t k = 0; k < n && k < budget_.singles; ++k) {
            std::vector<std::uint32_t> v = none;
            v[order[k]] = all[order[k]];
            out.push_back(v);
            v = all;
            v[order[k]] = 0;
            out.push_back(v);
        }
        std::vector<std::uint64_t> seqs;
        for (const auto& it : items_)
            seqs.insert(seqs.end(), it.seqs.begin(), it.seqs.end());
        std::sort(seqs.begin(), seqs.end());
        std::size_t cuts = std::min(budget_.time_prefixes, seqs.size());
        for (std::size_t c = 1; c <= cuts; ++c) {
            std::uint64_t tau = seqs[(seqs.size() * c) / (cuts + 1)];
            std::vector<std::uint32_t> v(n);
            for (std::size_t i = 0; i < n; ++i)
                v[i] = static_cast<std::uint32_t>(
                    std::upper_bound(items_[i].seqs.begin(), items_[i].seqs.end(), tau) -
                    items_[i].seqs.begin());
            out.push_back(v);
        }
        std::mt19937_64 rng(mix64(budget_.seed ^ (index * 0x9E3779B97F4A7C15ull)));
        for (std::size_t r = 0; r < budget_.random; ++r) {
            std::vector<std::uint32_t> v(n);
            for (std::size_t i = 0; i < n; ++i)
                v[i] = static_cast<std::uint32_t>(rng() % items_[i].levels());
            out.push_back(v);
        }
        return out;
    }

    void build(const std::vector<std::uint32_t>& level, image_patch& patch) const {
        patch.lines.clear();
        std::map<std::uint64_t, line_bytes> lines;
        auto content = [&](std::uint64_t line) -> line_bytes& {
            auto [it, fresh] = lines.try_emplace(line);
            if (fresh)
                std::memcpy(it->second.data(), dur_.data() + line * line_size, line_size);
            return it->second;
        };
        for (std::size_t i = 0; i < items_.size(); ++i) {
            const uncertain_item& it = items_[i];
            if (level[i] == 0 || it.nt)
                continue;
            content(it.where) = lines_[it.where].snaps[level[i] - 1];
        }
        for (std::size_t i = 0; i < items_.size(); ++i) {
            const uncertain_item& it = items_[i];
            if (level[i] == 0 || !it.nt)
                continue;
            line_bytes& c = content(it.where / line_size);
            const nt_unit& u = nt_.at(it.where);
            for (std::uint32_t k = 0; k < level[i]; ++k) {
                const nt_write& w = u.writes[k];
                std::memcpy(c.data() + (it.where % line_size) + w.at, w.bytes.data(), w.n);
            }
        }
        patch.hash = dur_hash_;
        for (auto& [line, c] : lines) {
            if (std::memcmp(c.data(), dur_.data() + line * line_size, line_size) == 0)
                continue;
            patch.hash += hash_line(line, c.data()) - line_hash_[line];
            patch.lines.emplace_back(line, c);
        }
    }

    const trace& t_;
    pool_layout layout_;
    image_budget budget_;
    std::vector<role> roles_;
    std::vector<std::size_t> mutated_;
    mutation::kind mut_kind_ = mutation::kind::none;

    std::vector<std::uint8_t> dur_;
    std::vector<std::uint64_t> line_hash_;
    std::uint64_t dur_hash_ = 0;
    std::vector<line_state> lines_;
    std::set<std::uint64_t> active_;
    std::map<std::uint64_t, nt_unit> nt_;
    std::vector<std::map<std::uint64_t, std::uint64_t>> marks_; ///< per thread: line -> mark
    std::vector<std::uint32_t> begun_, returned_;
    std::vector<std::int64_t> current_tx_;
    std::uint64_t seq_ = 0;
    bool dirty_ = false;

    std::vector<uncertain_item> items_;
    std::size_t points_ = 0, images_ = 0, sampled_points_ = 0;
};

} // namespace tlptm_harness
