#include "core/atomic_file.hpp"

#include <fcntl.h>
#include <openssl/evp.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>

#include "core/error.hpp"

namespace tandem {
namespace {

// "<marker><pid>.<8 hex>": unique per process and call.
std::string temp_suffix() {
  static std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}{}.{:08x}", kTempMarker, ::getpid(), static_cast<uint32_t>(rng()));
}

// Closes a descriptor on every path out of a scope.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

bool write_all(int fd, std::span<const char> bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

void write_file_atomic(const std::filesystem::path& path, std::span<const char> bytes) {
  const std::string tmp = path.string() + temp_suffix();
  Fd out{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644)};
  if (out.fd < 0)
    throw_bad_input("{}: cannot create a file beside it: {}", path.string(), std::strerror(errno));
  if (!write_all(out.fd, bytes) || ::fsync(out.fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw_bad_input("{}: write failed: {}", path.string(), std::strerror(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw_bad_input("{}: cannot replace: {}", path.string(), std::strerror(err));
  }
}

FileReader::FileReader(const std::filesystem::path& path, bool follow_symlinks)
    : path_(path.string()) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; fstat then refuses it.
  fd_ =
      ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | (follow_symlinks ? 0 : O_NOFOLLOW));
  if (fd_ < 0) {
    const int err = errno;
    if (err == EISDIR) throw_bad_input("{}: is a directory, expected a file", path_);
    if (err == ELOOP && !follow_symlinks)
      throw_bad_input("{}: a symlink, where a file of its own is expected", path_);
    throw_bad_input("{}: cannot open: {}", path_, std::strerror(err));
  }
  Fd owner{fd_};  // closes it if a check below throws
  struct stat st {};
  if (::fstat(fd_, &st) != 0) throw_bad_input("{}: cannot stat: {}", path_, std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw_bad_input("{}: is a directory, expected a file", path_);
  if (!S_ISREG(st.st_mode))
    throw_bad_input("{}: not a regular file (a device, FIFO or socket)", path_);
  size_ = static_cast<uint64_t>(st.st_size);
  owner.fd = -1;
}

FileReader::~FileReader() { ::close(fd_); }

std::string FileReader::read(uint64_t offset, uint64_t count) const {
  if (offset > size_ || count > size_ - offset)
    throw_bad_input("{}: bytes [{}, {}) are past its end ({} bytes)", path_, offset, offset + count,
                    size_);
  std::string bytes(static_cast<size_t>(count), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n =
        ::pread(fd_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw_bad_input("{}: read failed: {}", path_, std::strerror(errno));
    if (n == 0) throw_bad_input("{}: file shrank while being read", path_);
    done += static_cast<size_t>(n);
  }
  return bytes;
}

std::string read_file(const std::filesystem::path& path, uint64_t max_bytes, bool follow_symlinks) {
  const FileReader in(path, follow_symlinks);
  if (in.size() > max_bytes)
    throw_bad_input("{}: {} bytes, over the limit of {} bytes for this kind of file", path.string(),
                    in.size(), max_bytes);
  return in.read(0, in.size());
}

int remove_stale_temporaries(const std::filesystem::path& dir) {
  int removed = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const size_t at = name.find(kTempMarker);
    if (at == std::string::npos) continue;
    const long pid = std::strtol(name.c_str() + at + kTempMarker.size(), nullptr, 10);
    if (pid <= 0 || pid == ::getpid()) continue;  // not ours to judge, or ours and in use
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM) continue;  // still running
    std::error_code rm;
    // remove_all never follows a symlink: a planted link is removed, not its target.
    if (std::filesystem::remove_all(e.path(), rm) > 0 && !rm) ++removed;
  }
  return removed;
}

PrivateTempDir::PrivateTempDir(const std::filesystem::path& parent) {
  path_ = parent / temp_suffix();  // ".tandem-tmp.<pid>.<hex>": hidden
  if (::mkdir(path_.c_str(), 0700) != 0)
    throw_bad_input("{}: cannot create a temporary directory in it: {}", parent.string(),
                    std::strerror(errno));
}

PrivateTempDir::~PrivateTempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
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
