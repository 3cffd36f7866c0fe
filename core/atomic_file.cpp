#include "core/atomic_file.hpp"

#include <openssl/evp.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/error.hpp"

namespace tandem {

void write_file_atomic(const std::filesystem::path& path, std::span<const char> bytes) {
  const auto tmp = path.string() + fmt::format(".tmp.{}", ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw_bad_input("{}: cannot create (directory missing or not writable)", tmp);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      throw_bad_input("{}: write failed", tmp);
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    throw_bad_input("{}: cannot replace: {}", path.string(), ec.message());
  }
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_bad_input("{}: cannot open", path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string sha256_hex(std::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest, &len, EVP_sha256(), nullptr) != 1)
    throw std::runtime_error("OpenSSL EVP_Digest(sha256) failed");
  std::string hex;
  for (unsigned i = 0; i < len; ++i) hex += fmt::format("{:02x}", digest[i]);
  return hex;
}

}  // namespace tandem
