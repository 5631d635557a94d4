#pragma once
// The globals a module image defines (__device__ and __constant__ variables:
// PTX .global/.const declarations, an ELF cubin's object symbols, and those of
// the uncompressed PTX and cubins inside a fatbin), by name, with their sizes.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>

namespace fakegpu {

std::map<std::string, uint64_t> image_globals(std::string_view image, bool ptx);

// Calls `each` with every module-scope PTX statement, comments removed: a
// declaration ending in `;` (opens_body false) or the header of a function
// whose body follows (opens_body true).
void ptx_statements(std::string_view ptx,
                    const std::function<void(const std::string&, bool opens_body)>& each);

// One PTX variable declaration, e.g. `.visible .global .align 4 .b8 buf[16][2] = {...}`:
// whether it defines (not .extern) a variable in state space `space` (".global",
// ".const", ".shared"), with its name and size in bytes.
bool ptx_variable(const std::string& statement, std::string_view space, std::string* name,
                  uint64_t* bytes);

}  // namespace fakegpu
