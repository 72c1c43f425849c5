// Files, written once for every layer: reading a whole file, writing one atomically, making a
// directory. Here, at the lowest floor, because every layer that keeps a record writes files:
// tune's points, app's reports, eval's CSVs and plots, and the runtime's caches on disk.
//
// Every file pig writes whole goes through WriteFileAtomically: a reader sees the old contents
// or the new, never a part, also across a crash (the temporary is synced before the rename).
// Files written as they grow (tune's JSON Lines records, a CSV of a long run) are appended
// instead; their readers skip a truncated last line.
#pragma once

#include <string>
#include <string_view>

namespace pig::spec {

/// The whole file (binary). Throws std::runtime_error("cannot read PATH") when it cannot be
/// opened or read.
std::string ReadFile(const std::string &path);

/// Writes `text` to PATH.tmp, syncs it, then renames it over PATH. On any failure it throws
/// std::runtime_error ("cannot create PATH.tmp", "cannot write PATH.tmp", "cannot rename PATH.tmp
/// to PATH"), PATH keeps its old contents and no temporary it created is left. (One writer per
/// PATH at a time: two writers share the temporary's name.)
void WriteFileAtomically(const std::string &path, std::string_view text);

/// Creates a directory and its parents; no error when it exists. Throws std::runtime_error
/// ("cannot create directory PATH: why") when it cannot.
void MakeDirs(const std::string &path);

} // namespace pig::spec
