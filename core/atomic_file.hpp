#pragma once
// Files in and out. Writes are whole files or nothing: data goes to a private temporary beside the
// target (created O_EXCL|O_NOFOLLOW, so a planted symlink is never followed), then rename(2).
// Reads refuse what is not a regular file (a FIFO would block, /dev/zero never ends) and files
// over a stated size, before reading a byte.
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

namespace tandem {

// Largest file read_file accepts unless told otherwise (golden blobs, safetensors).
inline constexpr uint64_t kMaxReadBytes = uint64_t{1} << 30;
// Largest JSON document (configs, presets, manifests): far above any real one.
inline constexpr uint64_t kMaxJsonBytes = uint64_t{16} << 20;

// The temporary-name marker of this tool: "<target>.tandem-tmp.<pid>.<random>". Anything
// carrying it whose process is gone is a leftover of a killed run (remove_stale_temporaries).
inline constexpr std::string_view kTempMarker = ".tandem-tmp.";

void write_file_atomic(const std::filesystem::path& path, std::span<const char> bytes);
inline void write_file_atomic(const std::filesystem::path& path, std::string_view text) {
  write_file_atomic(path, std::span<const char>(text.data(), text.size()));
}
// Reads a whole regular file of at most `max_bytes`; anything else (missing, unreadable, a
// directory, a device or FIFO, too large; a symlink with follow_symlinks false) is BadInput
// naming it.
std::string read_file(const std::filesystem::path& path, uint64_t max_bytes = kMaxReadBytes,
                      bool follow_symlinks = true);
// A regular file open for reads at offsets, for files too large to read whole (checkpoint
// shards); opening anything else is BadInput naming it, as read_file.
class FileReader {
 public:
  // With follow_symlinks false, a symlink is refused when it is opened (O_NOFOLLOW).
  explicit FileReader(const std::filesystem::path& path, bool follow_symlinks = true);
  ~FileReader();
  FileReader(const FileReader&) = delete;
  FileReader& operator=(const FileReader&) = delete;
  uint64_t size() const { return size_; }
  const std::string& name() const { return path_; }
  // Bytes [offset, offset + count); past the end is BadInput naming the file.
  std::string read(uint64_t offset, uint64_t count) const;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};
// Removes the entries of `dir` (files or directories) carrying kTempMarker whose creating process
// no longer runs. Returns how many were removed.
int remove_stale_temporaries(const std::filesystem::path& dir);
// A fresh private directory "<parent>/.tandem-tmp.<pid>.<random>" (mode 0700), removed with
// whatever is left in it on destruction.
class PrivateTempDir {
 public:
  explicit PrivateTempDir(const std::filesystem::path& parent);
  ~PrivateTempDir();
  PrivateTempDir(const PrivateTempDir&) = delete;
  PrivateTempDir& operator=(const PrivateTempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};
// Lower-case hex SHA-256 (OpenSSL).
std::string sha256_hex(std::string_view bytes);

}  // namespace tandem
