#pragma once
// The globals a module image defines (__device__ and __constant__ variables:
// PTX .global/.const declarations, an ELF cubin's object symbols, and those of
// the uncompressed PTX and cubins inside a fatbin), by name, with their sizes.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace fakegpu {

std::map<std::string, uint64_t> image_globals(std::string_view image, bool ptx);

}  // namespace fakegpu
