// tlptm tool — a read-only view of a pool file.
//
// The tool inspects pools that may be damaged or that another process may want to open, so
// it never writes: the file is opened O_RDONLY, mapped PROT_READ anywhere in the address
// space (the log stores pool offsets; pointer values of compressed records are decoded with
// the base address of the header), and held under a shared flock so that no process opens
// the pool (pool::open takes LOCK_EX) while the tool reads it.
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <tlptm/detail/heap.hpp>
#include <tlptm/detail/layout.hpp>
#include <tlptm/errors.hpp>
#include <tlptm/log.hpp>
#include <tlptm/recovery.hpp>
#include <tlptm/stats.hpp>

namespace tlptm::tool {

/// Exit statuses of the tool.
inline constexpr int exit_ok = 0;       ///< success, or a clean pool
inline constexpr int exit_problems = 1; ///< problems found, pool in use, or the library failed
inline constexpr int exit_usage = 2;    ///< bad command line, or the file cannot be read

/// A failure that ends the command with `status` after printing what() on stderr.
class failure : public std::runtime_error {
public:
    failure(int status, const std::string& what) : std::runtime_error(what), status_(status) {}
    int status() const noexcept { return status_; }

private:
    int status_;
};

/// Drops the library's "tlptm: pool 'PATH': " prefix from a message, so that the tool's own
/// "PATH: " prefix does not repeat it.
inline std::string strip_pool_prefix(const std::string& what, const std::string& path) {
    const std::string prefix = "tlptm: pool '" + path + "': ";
    if (what.compare(0, prefix.size(), prefix) == 0)
        return what.substr(prefix.size());
    return what;
}

/// An open file descriptor, closed (and its flock dropped) by the destructor.
class unique_fd {
public:
    unique_fd() noexcept = default;
    explicit unique_fd(int fd) noexcept : fd_(fd) {}
    unique_fd(unique_fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
    unique_fd& operator=(unique_fd&& o) noexcept {
        if (this != &o) {
            reset();
            fd_ = std::exchange(o.fd_, -1);
        }
        return *this;
    }
    unique_fd(const unique_fd&) = delete;
    unique_fd& operator=(const unique_fd&) = delete;
    ~unique_fd() { reset(); }

    int get() const noexcept { return fd_; }
    void reset() noexcept {
        if (fd_ >= 0)
            ::close(fd_);
        fd_ = -1;
    }

private:
    int fd_ = -1;
};

/// Opens `path` read-only and takes a shared flock without waiting.
/// @throw failure exit_usage if the file cannot be opened or locked; exit_problems if another
///        process holds the pool open (the library keeps LOCK_EX while a pool is open)
inline unique_fd open_shared_locked(const std::string& path) {
    unique_fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0)
        throw failure(exit_usage, path + ": cannot open: " + std::strerror(errno));
    if (::flock(fd.get(), LOCK_SH | LOCK_NB) != 0) {
        if (errno == EWOULDBLOCK)
            throw failure(exit_problems,
                          path + ": in use by another process (locked); not touching it");
        throw failure(exit_usage, path + ": cannot lock: " + std::strerror(errno));
    }
    return fd;
}

/// The pool's log areas as the recovery of the library reads them.
struct ring_scan {
    std::uint32_t index = 0;
    std::uint64_t generation = 0;
    std::uint64_t base_ts = 0;
    std::size_t end = 0; ///< data offset where the walk stopped (first invalid byte)
    std::vector<detail::entry_view> entries;
    std::vector<std::size_t> offsets; ///< data offset of each entry
    /// Valid entries found past a damaged one at `end` (log_ring::for_each_entry_after_damage):
    /// none after a crash; any shows the log was damaged after it was written.
    std::vector<detail::entry_view> beyond_damage;
    std::vector<std::size_t> beyond_offsets;

    std::uint64_t bytes() const noexcept {
        std::uint64_t n = 0;
        for (const auto& e : entries)
            n += e.length;
        return n;
    }
};

/// The allocator as recovery rebuilds it: the persistent descriptors, bitmaps and heap summary
/// after the replay of the log entries with ts > CT (every arena read, as the library does only
/// lazily).
struct allocator_summary {
    /// False if the state could not be rebuilt: see `error` (damaged metadata) or `log_refused`.
    bool ok = false;
    /// Recovery would refuse the log (an entry to replay is malformed or out of range), so it
    /// would not get as far as rebuilding the allocator; `check` names the entry.
    bool log_refused = false;
    std::string error; ///< heap::rebuild's complaint without the pool prefix
    std::uint64_t entries_replayed = 0;
    /// Entries with ts > CT that recovery would not replay: a ring's last entry whose covered
    /// blocks do not match (its transaction never committed; recovery::refused_entries).
    std::uint64_t entries_refused = 0;
    std::uint64_t root_superblocks = 0;
    heap_stats figures;

    std::uint64_t small_superblocks() const noexcept {
        std::uint64_t n = 0;
        for (std::uint32_t c : figures.superblocks_per_class)
            n += c;
        return n;
    }
};

/// A pool file opened read-only and locked shared. The header is read and validated on
/// construction; the file is mapped only if the header is valid. Never writes.
class pool_view {
public:
    /// @throw failure see open_shared_locked; exit_usage if the header cannot be read
    explicit pool_view(std::string path) : path_(std::move(path)) {
        fd_ = open_shared_locked(path_);
        struct stat sb {};
        if (::fstat(fd_.get(), &sb) != 0)
            throw failure(exit_usage, path_ + ": cannot stat: " + std::strerror(errno));
        file_size_ = static_cast<std::uint64_t>(sb.st_size);
        std::memset(&header_, 0, sizeof header_);
        if (file_size_ >= detail::header_bytes) {
            ssize_t got = ::pread(fd_.get(), &header_, detail::header_bytes, 0);
            if (got != static_cast<ssize_t>(detail::header_bytes))
                throw failure(exit_usage, path_ + ": cannot read the pool header: " +
                                              (got < 0 ? std::strerror(errno) : "short read"));
        }
        try {
            detail::validate_header(header_, file_size_, path_);
        } catch (const tlptm::layout_error& e) {
            header_error_ = strip_pool_prefix(e.what(), path_);
            return;
        }
        void* m = ::mmap(nullptr, header_.pool_size, PROT_READ, MAP_SHARED, fd_.get(), 0);
        if (m == MAP_FAILED)
            throw failure(exit_usage,
                          path_ + ": cannot map the pool read-only: " + std::strerror(errno));
        map_ = static_cast<const std::uint8_t*>(m);
    }
    pool_view(const pool_view&) = delete;
    pool_view& operator=(const pool_view&) = delete;
    ~pool_view() {
        if (map_)
            ::munmap(const_cast<std::uint8_t*>(map_), header_.pool_size);
    }

    const std::string& path() const noexcept { return path_; }
    std::uint64_t file_size() const noexcept { return file_size_; }
    /// The header as read from the file (zeros if the file is shorter than a header).
    const detail::pool_header& header() const noexcept { return header_; }
    /// True if the file holds a whole header with the tlptm magic, so its fields mean
    /// something even when validation failed.
    bool header_present() const noexcept {
        return file_size_ >= detail::header_bytes &&
               std::memcmp(header_.magic, detail::pool_magic, sizeof detail::pool_magic) == 0;
    }
    /// validate_header's complaint without the "tlptm: pool 'PATH': " prefix; empty if valid.
    const std::string& header_error() const noexcept { return header_error_; }
    bool valid() const noexcept { return header_error_.empty(); }

    std::uint64_t checkpoint() const noexcept { return header_.checkpoint_ts; }

    /// The program's layout version word (pool.layout_version()) as stored in the file, before
    /// any replay of the log. Call only on a valid view.
    std::uint64_t layout_version() const noexcept {
        std::uint64_t v;
        std::memcpy(&v, map_ + detail::layout_version_offset(header_), sizeof v);
        return v;
    }

    /// I5: the offsets a log record may name (an aligned word in the heap or the metadata).
    bool replayable(std::uint64_t offset) const noexcept {
        const auto& h = header_;
        return offset % 8 == 0 &&
               ((offset >= h.heap_offset && offset <= h.heap_offset + h.heap_size - 8) ||
                (offset >= h.meta_offset && offset <= h.meta_offset + h.meta_size - 8));
    }

    /// True if the block [offset, offset + size) lies in the heap (where a log entry's covered
    /// blocks must lie).
    bool in_heap(std::uint64_t offset, std::uint64_t size) const noexcept {
        const std::uint64_t lo = header_.heap_offset, n = header_.heap_size;
        return offset >= lo && offset - lo <= n && size <= n - (offset - lo);
    }

    /// Ring `i` of the mapping. Call only on a valid view.
    detail::log_ring ring(std::uint32_t i) const noexcept {
        detail::log_ring r;
        // log_ring is the library's writable ring type; the tool only calls its const readers.
        r.base = const_cast<std::uint8_t*>(map_) + header_.log_offset +
                 std::uint64_t{i} * header_.ring_size;
        r.size = header_.ring_size;
        return r;
    }

    /// Walks every ring as recovery does. Call only on a valid view.
    std::vector<ring_scan> scan_rings() const {
        std::vector<ring_scan> out;
        out.reserve(header_.max_threads);
        for (std::uint32_t i = 0; i < header_.max_threads; ++i) {
            detail::log_ring r = ring(i);
            ring_scan s;
            s.index = i;
            s.generation = r.generation();
            s.base_ts = r.base_ts();
            s.end = r.for_each_entry([&](const detail::entry_view& e, std::size_t off) {
                s.entries.push_back(e);
                s.offsets.push_back(off);
            });
            r.for_each_entry_after_damage(s.end,
                                          s.entries.empty() ? s.base_ts : s.entries.back().ts,
                                          [&](const detail::entry_view& e, std::size_t off) {
                                              s.beyond_damage.push_back(e);
                                              s.beyond_offsets.push_back(off);
                                          });
            out.push_back(std::move(s));
        }
        return out;
    }

    /// Rebuilds the allocator's volatile state with the library's heap::rebuild, from the
    /// metadata as it will be after recovery: the entries with ts > CT of `rings` are replayed
    /// into a private copy-on-write mapping first (the file is never written). Call only on a
    /// valid view.
    /// @throw failure exit_usage if the private mapping cannot be made
    allocator_summary allocator_after_replay(const std::vector<ring_scan>& rings) const {
        allocator_summary a;
        a.root_superblocks = header_.root_capacity / detail::superblock_bytes;
        // Recovery replays in ts order and only if every record of every entry is sound.
        std::vector<const detail::entry_view*> todo;
        std::vector<const detail::entry_view*> ring_last; // each ring's last valid entry
        for (const ring_scan& r : rings) {
            for (const detail::entry_view& e : r.beyond_damage)
                if (e.ts > checkpoint()) { // recovery refuses a damaged log with these behind
                    a.log_refused = true;
                    return a;
                }
            for (const detail::entry_view& e : r.entries)
                if (e.ts > checkpoint())
                    todo.push_back(&e);
            if (!r.entries.empty())
                ring_last.push_back(&r.entries.back());
        }
        std::sort(
            todo.begin(), todo.end(),
            [](const detail::entry_view* x, const detail::entry_view* y) { return x->ts < y->ts; });
        if (detail::for_each_word_written_twice_at_one_ts(
                todo, header_.base_address, [](std::size_t, std::size_t, std::uint64_t) {}) != 0) {
            a.log_refused = true;
            return a;
        }
        for (std::size_t i = 0; i < todo.size(); ++i) {
            bool sound = true;
            sound = detail::decode_records(*todo[i], header_.base_address,
                                           [&](const detail::log_record& r) {
                                               if (!replayable(r.offset) || r.mask == 0)
                                                   sound = false;
                                           }) &&
                    sound;
            detail::for_each_covered(*todo[i], [&](const detail::pool_range& b) {
                sound = sound && in_heap(b.offset, b.size); // as recovery checks
            });
            if (!sound) {
                a.log_refused = true;
                return a;
            }
        }
        void* m =
            ::mmap(nullptr, header_.pool_size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd_.get(), 0);
        if (m == MAP_FAILED)
            throw failure(exit_usage, path_ + ": cannot map a private copy of the pool: " +
                                          std::strerror(errno));
        struct unmap_on_exit {
            void* addr;
            std::size_t size;
            ~unmap_on_exit() { ::munmap(addr, size); }
        } guard{m, header_.pool_size};
        auto* image = static_cast<std::uint8_t*>(m);
        std::vector<bool> last;
        for (const detail::entry_view* e : todo)
            last.push_back(std::find(ring_last.begin(), ring_last.end(), e) != ring_last.end());
        const std::vector<bool> refused =
            detail::refused_entries(image, header_.base_address, todo, last);
        for (std::size_t i = 0; i < todo.size(); ++i) {
            if (refused[i]) {
                ++a.entries_refused;
                continue;
            }
            const detail::entry_view* e = todo[i];
            detail::decode_records(*e, header_.base_address, [&](const detail::log_record& r) {
                std::uint64_t w;
                std::memcpy(&w, image + r.offset, 8);
                w = (w & ~r.mask) | (r.value & r.mask);
                std::memcpy(image + r.offset, &w, 8);
            });
            ++a.entries_replayed;
        }
        try {
            auto h = std::make_unique<detail::heap>();
            h->rebuild(image, header_, path_);
            h->scan_all(); // every arena, also those the heap summary calls empty
            a.figures = h->figures();
            a.ok = true;
        } catch (const tlptm::corruption_error& e) {
            a.error = strip_pool_prefix(e.what(), path_);
        }
        return a;
    }

    /// The 48 reserved bytes of ring `i`'s header line, which the layout keeps zero.
    bool ring_reserved_zero(std::uint32_t i) const noexcept {
        const std::uint8_t* p = ring(i).base + 16;
        return std::all_of(p, p + (detail::ring_header_bytes - 16),
                           [](std::uint8_t b) { return b == 0; });
    }

private:
    std::string path_;
    unique_fd fd_;
    std::uint64_t file_size_ = 0;
    detail::pool_header header_{};
    std::string header_error_;
    const std::uint8_t* map_ = nullptr;
};

} // namespace tlptm::tool
