// A progress indicator on stderr for long runs: "\r[a/tlptm 500ns]  45%" refreshed in place
// on a terminal (after the first second), or an occasional plain line when stderr is not a
// terminal and the run has lasted more than two seconds.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>

namespace workloads {

class progress_meter {
public:
    progress_meter(std::string label, bool enabled)
        : label_(std::move(label)), enabled_(enabled), tty_(::isatty(STDERR_FILENO) != 0),
          start_(clock::now()) {}
    progress_meter(const progress_meter&) = delete;
    progress_meter& operator=(const progress_meter&) = delete;

    /// Clears the in-place line, if one was shown.
    ~progress_meter() {
        if (shown_ && tty_) {
            std::fprintf(stderr, "\r%*s\r", static_cast<int>(label_.size()) + 6, "");
            std::fflush(stderr);
        }
    }

    /// Reports that `done` of `total` operations are finished (cheap when nothing is shown).
    void update(std::uint64_t done, std::uint64_t total) {
        if (!enabled_ || total == 0)
            return;
        const auto now = clock::now();
        const auto elapsed = now - start_;
        const auto since = now - last_;
        if (tty_ ? (elapsed < std::chrono::seconds(1) ||
                    (shown_ && since < std::chrono::milliseconds(200)))
                 : (elapsed < std::chrono::seconds(2) ||
                    (shown_ && since < std::chrono::seconds(10))))
            return;
        const unsigned pct = static_cast<unsigned>(done >= total ? 100 : done * 100 / total);
        std::fprintf(stderr, tty_ ? "\r%s %3u%%" : "%s %3u%%\n", label_.c_str(), pct);
        std::fflush(stderr);
        shown_ = true;
        last_ = now;
    }

private:
    using clock = std::chrono::steady_clock;
    std::string label_;
    bool enabled_;
    bool tty_;
    bool shown_ = false;
    clock::time_point start_;
    clock::time_point last_{};
};

} // namespace workloads
