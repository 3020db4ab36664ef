// tlptm — persistent transactional memory. Include this header to get the whole library.
#pragma once

#include <tlptm/alloc.hpp>
#include <tlptm/codec.hpp>
#include <tlptm/containers.hpp>
#include <tlptm/errors.hpp>
#include <tlptm/log.hpp>
#include <tlptm/options.hpp>
#include <tlptm/p.hpp>
#include <tlptm/persist.hpp>
#include <tlptm/pool.hpp>
#include <tlptm/recovery.hpp>
#include <tlptm/stats.hpp>
#include <tlptm/transaction.hpp>
