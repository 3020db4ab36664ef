// tlptm — the persistent containers: vector, string, hash_map (docs/containers.md).
#pragma once

#include <tlptm/containers/cell.hpp>
#include <tlptm/containers/hash.hpp>
#include <tlptm/containers/hash_map.hpp>
#include <tlptm/containers/string.hpp>
#include <tlptm/containers/vector.hpp>
