#pragma once
// Writes whole files or nothing: data goes to a temporary beside the target, then rename(2).
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

namespace tandem {

void write_file_atomic(const std::filesystem::path& path, std::span<const char> bytes);
inline void write_file_atomic(const std::filesystem::path& path, std::string_view text) {
  write_file_atomic(path, std::span<const char>(text.data(), text.size()));
}
// Reads a whole file; a missing or unreadable file is BadInput naming it.
std::string read_file(const std::filesystem::path& path);
// Lower-case hex SHA-256 (OpenSSL).
std::string sha256_hex(std::string_view bytes);

}  // namespace tandem
