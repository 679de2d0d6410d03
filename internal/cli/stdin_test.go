package cli

import (
	"context"
	"errors"
	"io"
	"os"
	"testing"
	"time"
)

// TestCtxReaderEndsBlockedRead: a read of a pipe whose writer neither
// writes nor closes ends with ctx's error once ctx ends (import - and
// verify - under SIGTERM), and what the writer wrote before is read whole.
func TestCtxReaderEndsBlockedRead(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	defer pr.Close()
	if _, err := pw.Write([]byte("archive bytes")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := ctxReader(ctx, pr)
	got := make([]byte, len("archive bytes"))
	if _, err := io.ReadFull(r, got); err != nil || string(got) != "archive bytes" {
		t.Fatalf("read %q, %v; want what the writer wrote", got, err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := r.Read(make([]byte, 10))
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("a read with nothing written returned %v before ctx ended", err)
	case <-time.After(100 * time.Millisecond):
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the blocked read returned %v; want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the blocked read still waits 10 s after ctx ended")
	}
}

// TestCtxReaderRegularFile: a regular file is read as it is, to its end.
func TestCtxReaderRegularFile(t *testing.T) {
	path := t.TempDir() + "/a.tar"
	if err := os.WriteFile(path, []byte("whole file"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got, err := io.ReadAll(ctxReader(ctx, f))
	if err != nil || string(got) != "whole file" {
		t.Fatalf("read %q, %v; want the whole file", got, err)
	}
}
