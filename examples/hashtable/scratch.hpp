// tlptm-workloads — scratch memory of the pool's kind: a file created where the pool goes,
// mapped as the pool is and unlinked at once. The persistence floor's measurements
// (floor.hpp) and the volatile table (volatile_hashtable.hpp) run on it.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <string>

namespace workloads {

/// Maps a new scratch file of `size` bytes at `path` (unlinked at once, so it goes with the
/// mapping); nullptr, with errno set, if it cannot be made.
inline void* map_scratch(const std::string& path, std::size_t size) {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return nullptr;
    ::unlink(path.c_str());
    void* m = MAP_FAILED;
    if (::ftruncate(fd, static_cast<off_t>(size)) == 0)
        m = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int err = errno; // of ftruncate or mmap, whatever close() does
    ::close(fd);
    errno = err;
    return m == MAP_FAILED ? nullptr : m;
}

/// Maps the pages of [p, p + n) for writing in one system call, as tlptm's allocator maps a
/// superblock it takes (madvise MADV_POPULATE_WRITE); nothing where the headers lack it.
inline void populate_for_writing(void* p, std::size_t n) noexcept {
#ifdef MADV_POPULATE_WRITE
    (void)::madvise(p, n, MADV_POPULATE_WRITE);
#else
    (void)p, (void)n;
#endif
}

} // namespace workloads
