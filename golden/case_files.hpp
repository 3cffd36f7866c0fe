#pragma once
// The files of a golden-case directory (DESIGN section 7): where a case's manifest and blob may
// live, and how a case is replaced so that no kill, signal or full disk leaves a manifest whose
// blob does not match it. Nothing here reads or writes outside the directory it is given.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::golden {

// `name` as a file directly inside `dir`: a plain file name (no separator, not "." or "..") that,
// if it exists, does not resolve (through symlinks) outside `dir`. BadInput naming `where`
// otherwise.
std::filesystem::path file_in(const std::filesystem::path& dir, std::string_view name,
                              const std::string& where);

// The manifests (*.json) in `dir`, sorted; an unreadable or missing directory is BadInput.
std::vector<std::filesystem::path> list_manifests(const std::filesystem::path& dir);

// A blob's content-addressed file name: "<case>.<first 16 hex digits of its SHA-256>.safetensors".
std::string blob_file_name(const std::string& case_name, const std::string& sha256_hex);

// Replaces (or creates) case `name` in `dir` as a pair: the blob is written under its
// content-addressed name (the old manifest still names the old blob), then the manifest is
// replaced by rename(2) (the commit point), then the blob the old manifest named is removed.
// A kill at any point leaves either the old pair or the new one, plus at most a leftover that
// remove_leftovers cleans.
void replace_case(const std::filesystem::path& dir, const std::string& name,
                  std::string_view blob_bytes, nlohmann::json manifest);

// Removes what killed runs leave: temporaries of dead processes, and blobs of a case "<case>.*"
// that its manifest "<case>.json" (present and readable) does not name.
void remove_leftovers(const std::filesystem::path& dir);

}  // namespace tandem::golden
