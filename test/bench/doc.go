// Package bench is holdfast's benchmark harness: it generates image archives
// with internal/fixture, starts fresh embedded containerds, and measures
// holdfast side by side with ctr and with a floor that does only what any
// import must (read, sha256, write, fsync), alternating the contenders round
// by round on the same machine. It reports medians, percentiles and ratios
// against the project's targets and writes every sample as JSON.
//
// cmd/holdfast-bench wires flags to [Run]; `make bench` runs it.
package bench
