package registries

import (
	"encoding/base64"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pelletier/go-toml/v2"
	"go.yaml.in/yaml/v3"

	"github.com/holdfast-project/holdfast/internal/testenv"
)

const fuzzPath = "/etc/holdfast/registries.yaml"

// FuzzRegistries: a registries.yaml never panics; an error names the file;
// a parsed file round-trips through YAML; every hosts.toml written for it
// starts with the Marker, parses as TOML and holds no credential; and an
// auth field that decodes gives back the username and password it encodes.
func FuzzRegistries(f *testing.F) {
	testenv.Seeds(f, map[string][]any{
		"sample":   {[]byte(sample)},
		"empty":    {[]byte("")},
		"crlf":     {[]byte(strings.ReplaceAll(sample, "\n", "\r\n"))},
		"catchall": {[]byte("mirrors:\n  \"*\":\n    endpoint: [\"http://127.0.0.1:5000\"]\n")},
		"token":    {[]byte("configs:\n  ghcr.io:\n    auth:\n      auth: " + base64.StdEncoding.EncodeToString([]byte("u:tok:en")) + "\n")},
		"unknown":  {[]byte("mirrors: {}\nextra: 1\n")},
		"bad-url":  {[]byte("mirrors:\n  a.io:\n    endpoint: [\"http://[::1\"]\n")},
		"dotdot":   {[]byte("mirrors:\n  ../../etc:\n    endpoint: [\"http://127.0.0.1:5000\"]\n")},
	})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 64<<10 {
			return
		}
		file, err := Parse(fuzzPath, b)
		if err != nil {
			if !strings.Contains(err.Error(), fuzzPath) {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		out, err := yaml.Marshal(file)
		if err != nil {
			t.Fatalf("marshalling %+v: %v", file, err)
		}
		again, err := Parse(fuzzPath, out)
		if err != nil {
			t.Fatalf("parsing %q written back: %v", out, err)
		}
		if !reflect.DeepEqual(normalise(again), normalise(file)) {
			t.Fatalf("round trip: %+v, then %+v", file, again)
		}
		var secrets []string
		for _, c := range file.Configs {
			if c.Auth != nil {
				for _, s := range []string{c.Auth.Password, c.Auth.Auth} {
					if len(s) >= 4 {
						secrets = append(secrets, s)
					}
				}
			}
		}
		files, warnings, herr := file.HostsFiles(fuzzPath)
		if herr != nil && !strings.Contains(herr.Error(), fuzzPath) {
			t.Fatalf("HostsFiles error %q does not name the file", herr)
		}
		for dir, content := range files {
			if !strings.HasPrefix(content, Marker+fuzzPath) {
				t.Fatalf("hosts.toml for %q does not start with the marker: %q", dir, content)
			}
			if dir == "" || dir == "." || dir == ".." || strings.ContainsAny(dir, "/\\\x00") {
				t.Fatalf("hosts dir %q is not one path element: Write would leave its dir", dir)
			}
			var v map[string]any
			if err := toml.Unmarshal([]byte(content), &v); err != nil {
				t.Fatalf("hosts.toml for %q is not TOML: %v\n%s", dir, err, content)
			}
			for _, s := range secrets {
				if strings.Contains(content, s) {
					t.Fatalf("hosts.toml for %q holds a credential %q", dir, s)
				}
			}
		}
		for _, w := range warnings {
			for _, s := range secrets {
				if strings.Contains(w, s) {
					t.Fatalf("warning %q holds a credential", w)
				}
			}
		}
		creds, cerr := file.Credentials()
		if cerr != nil {
			for _, s := range secrets {
				if strings.Contains(cerr.Error(), s) {
					t.Fatalf("error %q holds a credential", cerr)
				}
			}
			return
		}
		for host, c := range file.Configs {
			if c.Auth == nil || c.Auth.Auth == "" {
				continue
			}
			h := host
			if i := strings.Index(host, "://"); i >= 0 {
				continue // keyed by URL: its host is checked by TestCredentials
			}
			got := creds[h]
			if base64.StdEncoding.EncodeToString([]byte(got.Username+":"+got.Password)) != c.Auth.Auth {
				raw, _ := base64.StdEncoding.DecodeString(c.Auth.Auth)
				if string(raw) != got.Username+":"+got.Password {
					t.Fatalf("auth %q of %s decoded to %q:%q", c.Auth.Auth, h, got.Username, got.Password)
				}
			}
		}
	})
}

// normalise makes empty and absent maps and lists compare equal.
func normalise(f File) File {
	if len(f.Mirrors) == 0 {
		f.Mirrors = nil
	}
	if len(f.Configs) == 0 {
		f.Configs = nil
	}
	for k, m := range f.Mirrors {
		if len(m.Endpoints) == 0 {
			m.Endpoints = nil
		}
		if len(m.Rewrite) == 0 {
			m.Rewrite = nil
		}
		f.Mirrors[k] = m
	}
	return f
}

// TestLoadBound: a registries.yaml over MaxFileBytes is refused with an error
// naming it; the sample, with a long comment that keeps it inside, loads.
func TestLoadBound(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	big := filepath.Join(dir, "big.yaml")
	pad := "#" + strings.Repeat("x", 1022) + "\n"
	if err := os.WriteFile(big, []byte(sample+strings.Repeat(pad, MaxFileBytes/1024+1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(big); err == nil || !strings.Contains(err.Error(), big) || !strings.Contains(err.Error(), "larger than 4 MiB") {
		t.Fatalf("Load of a %d MiB file: %v", MaxFileBytes>>20, err)
	}
	fits := filepath.Join(dir, "fits.yaml")
	if err := os.WriteFile(fits, []byte(sample+strings.Repeat(pad, MaxFileBytes/1024-2)), 0o644); err != nil {
		t.Fatal(err)
	}
	if f, err := Load(fits); err != nil || len(f.Mirrors) != 3 {
		t.Fatalf("Load of a file inside the bound: %d mirrors, %v", len(f.Mirrors), err)
	}
}

// TestLoadRegularOnly: a registries.yaml that is a named pipe with no
// writer, or a device, is an error naming it at once, never waited on or
// read without end; a missing one is still fs.ErrNotExist (K3s's "no file,
// no mirrors").
func TestLoadRegularOnly(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "registries.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero.yaml")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{fifo, zero} {
		done := make(chan error, 1)
		go func() {
			_, err := Load(path)
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "not a regular file") {
				t.Errorf("Load(%s): %v; want an error naming it, not a regular file", path, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("Load(%s) has not returned after 10 s", path)
		}
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load of a missing file: %v; want fs.ErrNotExist", err)
	}
}
