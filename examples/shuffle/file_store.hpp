// File-based shuffles, the baselines NV-Shuffle was measured against, in a directory of a
// RAM file system (/dev/shm, the paper's tmpfs case):
//
// - hash-based: one file per (map task, partition), written with write(2) from a 32 KiB buffer
//   per partition (Spark's spark.shuffle.file.buffer) and created when the partition's first
//   bytes are written; the map task's commit fsyncs every file it wrote, then writes a marker
//   file with its summary (write, fsync, rename, fsync of the directory).
// - sort-based, as Spark's sort shuffle: the map task keeps its output in memory, orders it by
//   partition (a counting sort: Spark sorts by partition id only when there is no map-side
//   ordering), writes one data file and an index file of R + 1 offsets followed by its
//   summary; the commit is the index file's rename after both files are fsynced. No spilling:
//   a map task's output fits in memory at the sizes used here.
//
// After a crash, a map task is complete iff its marker (hash) or index file (sort) exists;
// the files of the others are removed and the tasks rerun.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "workload.hpp"

namespace shuffle {

namespace posix {

[[noreturn]] inline void fail(const std::string& what, const std::string& path) {
    throw std::system_error(errno, std::generic_category(), what + " " + path);
}

inline int open_file(const std::string& path, int flags) {
    int fd = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
    if (fd < 0)
        fail("cannot open", path);
    return fd;
}

inline void write_all(int fd, const void* data, std::size_t n, const std::string& path) {
    const auto* p = static_cast<const std::uint8_t*>(data);
    while (n > 0) {
        ssize_t k = ::write(fd, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            fail("cannot write", path);
        p += k;
        n -= static_cast<std::size_t>(k);
    }
}

inline void read_all_at(int fd, void* data, std::size_t n, std::uint64_t at,
                        const std::string& path) {
    auto* p = static_cast<std::uint8_t*>(data);
    while (n > 0) {
        ssize_t k = ::pread(fd, p, n, static_cast<off_t>(at));
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            fail("cannot read", path);
        p += k;
        at += static_cast<std::uint64_t>(k);
        n -= static_cast<std::size_t>(k);
    }
}

inline void sync_file(int fd, const std::string& path) {
    if (::fsync(fd) != 0)
        fail("cannot fsync", path);
}

inline void sync_dir(const std::string& dir) {
    int fd = open_file(dir, O_RDONLY | O_DIRECTORY);
    ::fsync(fd);
    ::close(fd);
}

/// Writes a small file durably under its final name: write, fsync, rename, fsync the directory.
inline void publish_file(const std::string& dir, const std::string& name, const void* data,
                         std::size_t n) {
    std::string tmp = dir + "/" + name + ".tmp", final_path = dir + "/" + name;
    int fd = open_file(tmp, O_WRONLY | O_CREAT | O_TRUNC);
    write_all(fd, data, n, tmp);
    sync_file(fd, tmp);
    ::close(fd);
    if (::rename(tmp.c_str(), final_path.c_str()) != 0)
        fail("cannot rename", tmp);
    sync_dir(dir);
}

/// The whole file, or false if it does not exist.
inline bool read_file(const std::string& path, std::vector<std::uint8_t>& out) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return false;
        fail("cannot open", path);
    }
    struct stat sb {};
    ::fstat(fd, &sb);
    std::size_t at = out.size();
    out.resize(at + static_cast<std::size_t>(sb.st_size));
    read_all_at(fd, out.data() + at, static_cast<std::size_t>(sb.st_size), 0, path);
    ::close(fd);
    return true;
}

/// Bytes of file space (allocated blocks) of the regular files in dir.
inline std::uint64_t space_used(const std::string& dir) {
    std::uint64_t total = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
        struct stat sb {};
        if (::stat(e.path().c_str(), &sb) == 0 && S_ISREG(sb.st_mode))
            total += static_cast<std::uint64_t>(sb.st_blocks) * 512;
    }
    return total;
}

} // namespace posix

/// The summary a committed map task leaves with its files.
inline std::vector<std::uint8_t> encode_summary(const map_summary& s) {
    std::vector<std::uint8_t> b(sizeof(map_summary));
    std::memcpy(b.data(), &s, sizeof s);
    return b;
}

/// One file per (map task, partition).
class hash_file_store {
public:
    static constexpr std::size_t buffer_bytes = 32 << 10;

    hash_file_store(std::string dir, const workload& w) : dir_(std::move(dir)), w_(w) {
        std::filesystem::create_directories(dir_);
    }

    std::string file(std::uint32_t m, std::uint32_t p) const {
        return dir_ + "/shuffle_" + std::to_string(m) + "_" + std::to_string(p) + ".data";
    }
    std::string marker(std::uint32_t m) const { return "shuffle_" + std::to_string(m) + ".done"; }
    bool complete(std::uint32_t m) const {
        return ::access((dir_ + "/" + marker(m)).c_str(), F_OK) == 0;
    }

    /// Runs map task m; returns the files it created. Records are generated straight into the
    /// partition's buffer.
    std::uint64_t run_map_task(std::uint32_t m) {
        std::vector<int> fds(w_.partitions, -1);
        std::vector<std::unique_ptr<std::uint8_t[]>> buf(w_.partitions);
        std::vector<std::size_t> fill(w_.partitions, 0);
        std::uint64_t files = 0;
        auto drain = [&](std::uint32_t p) {
            if (fds[p] < 0) {
                fds[p] = posix::open_file(file(m, p), O_WRONLY | O_CREAT | O_TRUNC);
                ++files;
            }
            posix::write_all(fds[p], buf[p].get(), fill[p], file(m, p));
            fill[p] = 0;
        };
        map_summary s = run_map_into(w_, m, [&](std::uint32_t p, std::size_t n) {
            if (!buf[p])
                buf[p] = std::make_unique_for_overwrite<std::uint8_t[]>(buffer_bytes);
            if (fill[p] + n > buffer_bytes)
                drain(p);
            std::uint8_t* at = buf[p].get() + fill[p];
            fill[p] += n;
            return at;
        });
        for (std::uint32_t p = 0; p < w_.partitions; ++p) {
            if (fill[p] > 0)
                drain(p);
            if (fds[p] >= 0) {
                posix::sync_file(fds[p], file(m, p));
                ::close(fds[p]);
            }
        }
        std::vector<std::uint8_t> sum = encode_summary(s);
        posix::publish_file(dir_, marker(m), sum.data(), sum.size());
        return files;
    }

    /// Reads partition p of every complete map task into one buffer (sized first from the
    /// files' lengths, so it is written once).
    void read_partition(std::uint32_t p, partition_data& out) const {
        struct open_file {
            int fd;
            std::uint64_t size;
            std::string path;
        };
        std::vector<open_file> files;
        std::uint64_t total = 0;
        for (std::uint32_t m = 0; m < w_.maps; ++m) {
            if (!complete(m))
                continue;
            std::string path = file(m, p);
            int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
            if (fd < 0) {
                if (errno == ENOENT)
                    continue; // the map task had no record for this partition
                posix::fail("cannot open", path);
            }
            struct stat sb {};
            ::fstat(fd, &sb);
            files.push_back({fd, static_cast<std::uint64_t>(sb.st_size), std::move(path)});
            total += static_cast<std::uint64_t>(sb.st_size);
        }
        std::uint8_t* buf = total ? out.storage(total) : nullptr;
        std::uint64_t at = 0;
        for (open_file& f : files) {
            posix::read_all_at(f.fd, buf + at, f.size, 0, f.path);
            ::close(f.fd);
            at += f.size;
        }
        if (total)
            out.pieces.emplace_back(buf, total);
    }

    map_summary summary(std::uint32_t m) const {
        std::vector<std::uint8_t> b;
        map_summary s;
        if (!posix::read_file(dir_ + "/" + marker(m), b) || b.size() != sizeof s)
            throw std::runtime_error("map task " + std::to_string(m) + " has no valid marker");
        std::memcpy(&s, b.data(), sizeof s);
        return s;
    }

    /// Removes the files of every incomplete map task; returns how many tasks that was.
    std::uint32_t discard_incomplete() {
        std::uint32_t n = 0;
        for (std::uint32_t m = 0; m < w_.maps; ++m) {
            if (complete(m))
                continue;
            ++n;
            for (std::uint32_t p = 0; p < w_.partitions; ++p)
                ::unlink(file(m, p).c_str());
        }
        return n;
    }

    std::uint64_t space_used() const { return posix::space_used(dir_); }

private:
    std::string dir_;
    workload w_;
};

/// One data file and one index file per map task.
class sort_file_store {
public:
    sort_file_store(std::string dir, const workload& w) : dir_(std::move(dir)), w_(w) {
        std::filesystem::create_directories(dir_);
    }

    std::string data_file(std::uint32_t m) const {
        return dir_ + "/shuffle_" + std::to_string(m) + ".data";
    }
    std::string index_name(std::uint32_t m) const {
        return "shuffle_" + std::to_string(m) + ".index";
    }
    bool complete(std::uint32_t m) const {
        return ::access((dir_ + "/" + index_name(m)).c_str(), F_OK) == 0;
    }

    /// Runs map task m; returns the files it created (2). Records are generated straight into
    /// the task's in-memory output.
    std::uint64_t run_map_task(std::uint32_t m) {
        struct where {
            std::uint32_t partition, length;
            std::uint64_t offset;
        };
        std::vector<where> index;
        std::size_t cap = w_.kind == workload_kind::terasort
                              ? static_cast<std::size_t>(w_.records_of(m) * w_.record_size)
                              : std::size_t{1} << 20;
        cap = std::max<std::size_t>(cap, 64);
        auto records = std::make_unique_for_overwrite<std::uint8_t[]>(cap);
        std::size_t size = 0;
        map_summary s = run_map_into(w_, m, [&](std::uint32_t p, std::size_t n) {
            if (size + n > cap) { // wordcount: grow
                std::size_t bigger = std::max(cap * 2, size + n);
                auto more = std::make_unique_for_overwrite<std::uint8_t[]>(bigger);
                std::memcpy(more.get(), records.get(), size);
                records = std::move(more);
                cap = bigger;
            }
            index.push_back({p, static_cast<std::uint32_t>(n), size});
            std::uint8_t* at = records.get() + size;
            size += n;
            return at;
        });
        // Order by partition (stable counting sort), then one sequential data file.
        std::vector<std::uint64_t> offsets(w_.partitions + 1, 0);
        for (const where& x : index)
            offsets[x.partition + 1] += x.length;
        for (std::uint32_t p = 0; p < w_.partitions; ++p)
            offsets[p + 1] += offsets[p];
        auto sorted =
            std::make_unique_for_overwrite<std::uint8_t[]>(std::max<std::size_t>(size, 1));
        std::vector<std::uint64_t> fill(offsets.begin(), offsets.end() - 1);
        for (const where& x : index) {
            std::memcpy(sorted.get() + fill[x.partition], records.get() + x.offset, x.length);
            fill[x.partition] += x.length;
        }
        int fd = posix::open_file(data_file(m), O_WRONLY | O_CREAT | O_TRUNC);
        constexpr std::size_t piece = 1 << 20;
        for (std::size_t at = 0; at < size; at += piece)
            posix::write_all(fd, sorted.get() + at, std::min(piece, size - at), data_file(m));
        posix::sync_file(fd, data_file(m));
        ::close(fd);
        std::vector<std::uint8_t> idx(offsets.size() * 8);
        std::memcpy(idx.data(), offsets.data(), idx.size());
        std::vector<std::uint8_t> sum = encode_summary(s);
        idx.insert(idx.end(), sum.begin(), sum.end());
        posix::publish_file(dir_, index_name(m), idx.data(), idx.size()); // the commit
        return 2;
    }

    /// Reads partition p's segment of every complete map task's data file into one buffer
    /// (sized first from the index files).
    void read_partition(std::uint32_t p, partition_data& out) const {
        std::vector<std::uint8_t> idx;
        struct segment {
            std::uint32_t m;
            std::uint64_t from, bytes;
        };
        std::vector<segment> segs;
        std::uint64_t total = 0;
        for (std::uint32_t m = 0; m < w_.maps; ++m) {
            idx.clear();
            if (!posix::read_file(dir_ + "/" + index_name(m), idx))
                continue;
            std::uint64_t from, to;
            std::memcpy(&from, idx.data() + 8 * p, 8);
            std::memcpy(&to, idx.data() + 8 * (p + 1), 8);
            if (to > from) {
                segs.push_back({m, from, to - from});
                total += to - from;
            }
        }
        std::uint8_t* buf = total ? out.storage(total) : nullptr;
        std::uint64_t at = 0;
        for (const segment& g : segs) {
            int fd = posix::open_file(data_file(g.m), O_RDONLY);
            posix::read_all_at(fd, buf + at, g.bytes, g.from, data_file(g.m));
            ::close(fd);
            at += g.bytes;
        }
        if (total)
            out.pieces.emplace_back(buf, total);
    }

    map_summary summary(std::uint32_t m) const {
        std::vector<std::uint8_t> b;
        map_summary s;
        std::size_t at = 8 * (std::size_t{w_.partitions} + 1);
        if (!posix::read_file(dir_ + "/" + index_name(m), b) || b.size() != at + sizeof s)
            throw std::runtime_error("map task " + std::to_string(m) + " has no valid index");
        std::memcpy(&s, b.data() + at, sizeof s);
        return s;
    }

    std::uint32_t discard_incomplete() {
        std::uint32_t n = 0;
        for (std::uint32_t m = 0; m < w_.maps; ++m) {
            if (complete(m))
                continue;
            ++n;
            ::unlink(data_file(m).c_str());
        }
        return n;
    }

    std::uint64_t space_used() const { return posix::space_used(dir_); }

private:
    std::string dir_;
    workload w_;
};

} // namespace shuffle
