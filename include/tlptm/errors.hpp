// tlptm — the exception hierarchy.
//
// Every error the library reports derives from tlptm::error (itself a std::runtime_error), so a
// caller can catch one type; each has exactly one std::exception base, so a handler for
// std::exception catches them all too (tests/errors_test.cpp). Messages name the file, the field
// or the sizes involved.
#pragma once

#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string>

namespace tlptm {

/// Base of every tlptm exception.
class error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// A pool file could not be created, opened, locked or mapped.
/// The message carries the path and, where a system call failed, its errno text.
class pool_error : public error {
public:
    pool_error(const std::string& path, const std::string& what, int err = 0)
        : error(compose(path, what, err)), path_(path), errno_(err) {}

    /// The pool file the error is about.
    const std::string& path() const noexcept { return path_; }
    /// The errno of the failed system call, or 0.
    int error_number() const noexcept { return errno_; }

private:
    static std::string compose(const std::string& path, const std::string& what, int err) {
        std::string m = "tlptm: pool '" + path + "': " + what;
        if (err != 0)
            m += ": " + std::string(std::strerror(err));
        return m;
    }
    std::string path_;
    int errno_;
};

/// The pool file is not a tlptm pool, is corrupt, has a newer layout version, or its root has
/// another type than the one requested. The message names the offending field.
class layout_error : public error {
public:
    using error::error;
};

/// A transactional operation was attempted outside a transaction (for example a store to a
/// tlptm::p<T> outside tlptm::atomic), or on memory outside the transaction's pool.
class tx_scope_error : public error {
public:
    using error::error;
};

/// The pool has no room for an allocation. The transaction that asked is aborted.
///
/// Catch it as tlptm::out_of_memory, tlptm::error or std::exception. It is deliberately not a
/// std::bad_alloc: tlptm::error is a std::runtime_error, and a class derived from both would
/// hold two std::exception bases, which makes std::exception an ambiguous base: a
/// `catch (const std::exception&)` would not match it and the exception would escape. A
/// std::bad_alloc thrown by the library means what it means for any C++ code: volatile memory
/// (a transaction's write set, say) could not be allocated, not that the pool is full.
class out_of_memory : public error {
public:
    using error::error;
};

/// A transaction's log entry is larger than the thread's log ring. The transaction is aborted
/// and nothing of it reaches the pool.
class log_overflow : public error {
public:
    log_overflow(std::size_t needed, std::size_t capacity)
        : error("tlptm: transaction log entry needs " + std::to_string(needed) +
                " bytes but the thread's log ring holds at most " + std::to_string(capacity) +
                " bytes (raise pool_options::log_capacity when creating the pool)"),
          needed_(needed), capacity_(capacity) {}

    /// Bytes the entry would take.
    std::size_t needed() const noexcept { return needed_; }
    /// Largest entry the ring can hold.
    std::size_t capacity() const noexcept { return capacity_; }

private:
    std::size_t needed_;
    std::size_t capacity_;
};

/// Recovery found a structurally valid log entry whose content cannot be trusted (an address
/// outside the pool's heap or metadata, duplicate timestamps...). Recovery writes nothing.
class corruption_error : public error {
public:
    using error::error;
};

} // namespace tlptm
