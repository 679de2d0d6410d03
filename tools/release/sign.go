package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// cosign runs cosign v3 to sign with the release key, offline: by a signing
// config that names no transparency log, timestamp or certificate
// authority (cosign v3 signs by key offline only with one), its TUF cache
// in the release's work dir.
type cosign struct {
	bin, key, config string
	env              []string
}

// newCosign makes the offline signing config in work.
func newCosign(bin, key, work string) (*cosign, error) {
	env := append(os.Environ(), "COSIGN_YES=true", "SIGSTORE_NO_CACHE=true", "TUF_ROOT="+filepath.Join(work, "tuf"))
	if _, ok := os.LookupEnv("COSIGN_PASSWORD"); !ok {
		env = append(env, "COSIGN_PASSWORD=") // no prompt: a key without a password
	}
	c := &cosign{bin: bin, key: key, config: filepath.Join(work, "offline-signing-config.json"), env: env}
	if err := c.run("signing-config", "create", "--out", c.config); err != nil {
		return nil, err
	}
	return c, nil
}

// withEnv is c with kv (KEY=value) added to cosign's environment.
func (c *cosign) withEnv(kv ...string) *cosign {
	out := *c
	out.env = append(slices.Clone(c.env), kv...)
	return &out
}

// run runs cosign; its output (never the key: cosign reads it from a file
// or the environment) is in the error.
func (c *cosign) run(args ...string) error {
	cmd := exec.Command(c.bin, args...)
	cmd.Env = c.env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("cosign %s: %v\n%s", args[0], err, strings.TrimSpace(out.String()))
	}
	return nil
}

// signImage signs ref (repo@digest, in the local registry) with a sigstore
// bundle pushed as a referrer; recursive: each manifest of an index too.
func (c *cosign) signImage(ref string, recursive bool) error {
	args := []string{"sign", "--key", c.key, "--signing-config", c.config, "--allow-http-registry"}
	if recursive {
		args = append(args, "--recursive")
	}
	return c.run(append(args, ref)...)
}

// signBlob writes the sigstore bundle of file to bundle.
func (c *cosign) signBlob(file, bundle string) error {
	return c.run("sign-blob", "--key", c.key, "--signing-config", c.config, "--bundle", bundle, file)
}

// publicKey writes the key's public key to out.
func (c *cosign) publicKey(out string) error {
	return c.run("public-key", "--key", c.key, "--outfile", out)
}
