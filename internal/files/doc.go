// Package files is how holdfast reads, writes and locks files. Reads are
// bounded: a file or stream larger than its limit is refused once the limit
// is passed, never read whole (ReadAll, ReadFile); files are opened as
// regular files only (Open, OpenNoFollow, OpenIn), so that a named pipe, a
// device or a directory given where a file is read is refused at once, never
// waited on or read without end. Writes are atomic: a new file beside the
// path renamed over it, durable or not (WriteFile, ReplaceFile, WriteFileAt,
// Create). Locks are flocks, waited for (Lock) or tried (TryLock). CheckPerms
// says whether a file holdfast trusts may be changed by a user but root and
// holdfast's own.
package files
