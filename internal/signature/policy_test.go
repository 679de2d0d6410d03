package signature

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

const trustedRoot = `{"mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1", "tlogs": []}`

func write(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// pemOf is the "PUBLIC KEY" PEM block of pub.
func pemOf(t testing.TB, pub crypto.PublicKey) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

func ecdsaKey(t testing.TB, curve elliptic.Curve) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(curve, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// writeKey writes pub as a PEM public key file at path.
func writeKey(t testing.TB, path string, pub crypto.PublicKey) {
	t.Helper()
	write(t, path, string(pemOf(t, pub)))
}

func TestLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	platform := ecdsaKey(t, elliptic.P256())
	backup := ecdsaKey(t, elliptic.P384())
	edPub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	writeKey(t, filepath.Join(dir, "keys", "platform.pub"), &platform.PublicKey)
	writeKey(t, filepath.Join(dir, "keys", "backup.pub"), &backup.PublicKey)
	edPath := filepath.Join(t.TempDir(), "edge.pub") // elsewhere, given by its absolute path
	writeKey(t, edPath, edPub)
	write(t, filepath.Join(dir, "sigstore", "trusted_root.json"), trustedRoot)
	path := filepath.Join(dir, "policy.yaml")
	write(t, path, `# holdfast signature policy
mode: enforce
rules:
  - images: ["registry.example.com/platform/*", nginx]
    keys:
      - keys/platform.pub
      - ./keys/backup.pub
  - images:
      - "*edge*"
    keys: [`+edPath+`]
    keyless:
      trustedRoot: sigstore/trusted_root.json
      identities:
        - issuer: https://token.actions.githubusercontent.com
          subjectRegExp: "^https://github.com/example/.*$"
        - issuerRegExp: "^https://accounts\\.example\\.com$"
          subject: ops@example.com
  - images: ["*"]
    keyless:
      trustedRoot: `+filepath.Join(dir, "sigstore", "trusted_root.json")+`
      identities: [{issuer: "https://accounts.example.com", subject: "release@example.com"}]
`)
	p, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if p.Mode != Enforce || p.Path != path || len(p.Rules) != 3 {
		t.Fatalf("Load = mode %q, path %q, %d rules", p.Mode, p.Path, len(p.Rules))
	}

	r := p.Rules[0]
	if r.Line != 4 || r.Keyless != nil {
		t.Errorf("rule 0: line %d, keyless %v", r.Line, r.Keyless)
	}
	if got := patterns(r); !reflect.DeepEqual(got, []string{"registry.example.com/platform/*", "docker.io/library/nginx"}) {
		t.Errorf("rule 0 images %q", got)
	}
	if len(r.Keys) != 2 {
		t.Fatalf("rule 0: %d keys", len(r.Keys))
	}
	for i, want := range []struct {
		path string
		pub  *ecdsa.PublicKey
	}{
		{filepath.Join(dir, "keys", "platform.pub"), &platform.PublicKey},
		{filepath.Join(dir, "keys", "backup.pub"), &backup.PublicKey},
	} {
		k := r.Keys[i]
		if k.Path != want.path {
			t.Errorf("key %d: path %q, want %q", i, k.Path, want.path)
		}
		if pub, ok := k.Public.(*ecdsa.PublicKey); !ok || !pub.Equal(want.pub) {
			t.Errorf("key %d: public key %T is not the one written", i, k.Public)
		}
		if !bytes.Equal(k.PEM, pemOf(t, want.pub)) {
			t.Errorf("key %d: PEM\n%s", i, k.PEM)
		}
	}

	r = p.Rules[1]
	if r.Line != 8 {
		t.Errorf("rule 1: line %d, want 8", r.Line)
	}
	if got := patterns(r); !reflect.DeepEqual(got, []string{"*edge*"}) {
		t.Errorf("rule 1 images %q", got)
	}
	if len(r.Keys) != 1 || r.Keys[0].Path != edPath || !edPub.Equal(r.Keys[0].Public) {
		t.Errorf("rule 1 keys %+v", r.Keys)
	}
	wantKeyless := &Keyless{
		TrustedRoot:     filepath.Join(dir, "sigstore", "trusted_root.json"),
		TrustedRootJSON: []byte(trustedRoot),
		Identities: []Identity{
			{Issuer: "https://token.actions.githubusercontent.com", SubjectRegExp: "^https://github.com/example/.*$"},
			{IssuerRegExp: `^https://accounts\.example\.com$`, Subject: "ops@example.com"},
		},
	}
	if !reflect.DeepEqual(r.Keyless, wantKeyless) {
		t.Errorf("rule 1 keyless\n got %+v\nwant %+v", r.Keyless, wantKeyless)
	}

	r = p.Rules[2]
	if r.Line != 18 || len(r.Keys) != 0 || r.Keyless == nil {
		t.Fatalf("rule 2: line %d, keys %v, keyless %v", r.Line, r.Keys, r.Keyless)
	}
	if got := r.Keyless.Identities; !reflect.DeepEqual(got, []Identity{{Issuer: "https://accounts.example.com", Subject: "release@example.com"}}) {
		t.Errorf("rule 2 identities %+v", got)
	}
}

func patterns(r Rule) []string {
	var out []string
	for _, p := range r.Images {
		out = append(out, p.String())
	}
	return out
}

// testPolicy writes a key and a trusted root into a temp dir, then the policy
// text, and returns the policy file's path.
func testPolicy(t *testing.T, text string) string {
	t.Helper()
	dir := t.TempDir()
	writeKey(t, filepath.Join(dir, "a.pub"), &ecdsaKey(t, elliptic.P256()).PublicKey)
	write(t, filepath.Join(dir, "root.json"), trustedRoot)
	path := filepath.Join(dir, "policy.yaml")
	write(t, path, text)
	return path
}

func TestModeDefaultsToWarn(t *testing.T) {
	t.Parallel()
	p, err := Load(testPolicy(t, "rules:\n  - images: [nginx]\n    keys: [a.pub]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p.Mode != Warn {
		t.Errorf("mode %q, want warn", p.Mode)
	}
}

func TestRuleFor(t *testing.T) {
	t.Parallel()
	p, err := Load(testPolicy(t, `mode: warn
rules:
  - images: ["registry.example.com/platform/*"]
    keys: [a.pub]
  - images: ["registry.example.com/*", "nginx:1.25"]
    keys: [a.pub]
  - images: ["*mirror*"]
    keys: [a.pub]
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		line int // 0: no rule
	}{
		{"registry.example.com/platform/api:1", 3}, // rules 1 and 2 match: the first applies
		{"registry.example.com/platform/api@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 3},
		{"registry.example.com/team/app:2", 5},
		{"docker.io/library/nginx:1.25", 5},
		{"nginx:1.25", 5}, // normalised before matching
		{"docker.io/library/nginx:1.26", 0},
		{"quay.io/mirror/nginx:1", 7},
		{"quay.io/other/app:1", 0},
		{"sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 0},
	} {
		r, ok := p.RuleFor(tc.name)
		switch {
		case tc.line == 0 && (ok || r != nil):
			t.Errorf("RuleFor(%q) = rule at line %d, want none", tc.name, r.Line)
		case tc.line != 0 && (!ok || r == nil):
			t.Errorf("RuleFor(%q) = none, want the rule at line %d", tc.name, tc.line)
		case tc.line != 0 && r.Line != tc.line:
			t.Errorf("RuleFor(%q) = rule at line %d, want line %d", tc.name, r.Line, tc.line)
		case ok && r != &p.Rules[(tc.line-3)/2]:
			t.Errorf("RuleFor(%q) returned a copy, not the policy's rule", tc.name)
		}
	}
	var none *Policy
	if r, ok := none.RuleFor("docker.io/library/nginx:1"); ok || r != nil {
		t.Errorf("nil policy: RuleFor = %v, %v", r, ok)
	}
}

func TestRuleForStar(t *testing.T) {
	t.Parallel()
	p, err := Load(testPolicy(t, "rules:\n  - images: [\"*\"]\n    keys: [a.pub]\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"docker.io/library/nginx:1", "nginx", "localhost:5000/a@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "registry.example.com/a/b/c:d"} {
		if _, ok := p.RuleFor(name); !ok {
			t.Errorf(`"*" does not match %q`, name)
		}
	}
	if _, ok := p.RuleFor("sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"); ok {
		t.Error(`"*" matches a CRI image ID, which is no image name`)
	}
}

// lineErrors splits a Load error into its LineErrors, failing on anything else.
func lineErrors(t *testing.T, err error) []LineError {
	t.Helper()
	if err == nil {
		t.Fatal("Load succeeded")
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	var out []LineError
	for _, e := range errs {
		var le LineError
		if !errors.As(e, &le) {
			t.Fatalf("error %q is not a LineError", e)
		}
		out = append(out, le)
	}
	return out
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	const keyless = "    keyless:\n      trustedRoot: root.json\n      identities:\n"
	for _, tc := range []struct {
		name  string
		text  string
		files map[string]string // written beside the policy
		line  int
		want  string // in the cause
	}{
		{"unknown top-level key", "mode: warn\nrules:\n  - images: [nginx]\n    keys: [a.pub]\nrule: []\n", nil, 5,
			`unknown key "rule" in the policy (want mode, rules)`},
		{"unknown key in a rule", "rules:\n  - images: [nginx]\n    keys: [a.pub]\n    key: [a.pub]\n", nil, 4,
			`unknown key "key" in a rule (want images, keys, keyless)`},
		{"unknown key in keyless", "rules:\n  - images: [nginx]\n" + keyless + "        - {issuer: i, subject: s}\n      rekor: x\n", nil, 7,
			`unknown key "rekor" in keyless (want trustedRoot, identities)`},
		{"unknown key in an identity", "rules:\n  - images: [nginx]\n" + keyless + "        - issuer: i\n          subject: s\n          subjectRegexp: s\n", nil, 8,
			`unknown key "subjectRegexp" in an identity; did you mean subjectRegExp?`},
		{"key given twice", "mode: warn\nrules:\n  - images: [nginx]\n    keys: [a.pub]\nmode: enforce\n", nil, 5,
			"mode given twice in the policy (first at line 1)"},
		{"bad mode", "mode: strict\nrules:\n  - images: [nginx]\n    keys: [a.pub]\n", nil, 1,
			`mode "strict": want enforce or warn`},
		{"mode not a string", "rules:\n  - images: [nginx]\n    keys: [a.pub]\nmode: [enforce]\n", nil, 4,
			"mode: want a string, got a list"},
		{"mode a boolean", "mode: true\nrules:\n  - images: [nginx]\n    keys: [a.pub]\n", nil, 1,
			"mode: want a string, got the boolean true"},
		{"empty file", "# nothing yet\n", nil, 1, "no rules: a policy needs at least one"},
		{"no rules", "mode: enforce\n", nil, 1, "no rules: a policy needs at least one"},
		{"empty rules", "mode: enforce\nrules: []\n", nil, 2, "rules: empty; a policy needs at least one"},
		{"not a mapping", "- images: [nginx]\n", nil, 1, "want a mapping of mode and rules, got a list"},
		{"rule not a mapping", "rules:\n  - nginx\n", nil, 2, `rule: want a mapping of images and keys or keyless, got the string "nginx"`},
		{"rule without images", "rules:\n  - images: [nginx]\n    keys: [a.pub]\n  - keys: [a.pub]\n", nil, 4,
			"rule has no images"},
		{"empty images", "rules:\n  - images: []\n    keys: [a.pub]\n", nil, 2, "images: empty"},
		{"images not a list", "rules:\n  - images: nginx\n    keys: [a.pub]\n", nil, 2, `images: want a list, got the string "nginx"`},
		{"image not a string", "rules:\n  - images:\n      - nginx\n      - {name: redis}\n    keys: [a.pub]\n", nil, 4,
			"images: want a string, got a mapping"},
		{"bad pattern", "rules:\n  - images:\n      - nginx\n      - Nginx\n    keys: [a.pub]\n", nil, 4,
			`images: invalid pattern "Nginx": repository name must be lowercase`},
		{"star inside a pattern", "rules:\n  - images: [\"ngi*nx\"]\n    keys: [a.pub]\n", nil, 2, `images: invalid pattern "ngi*nx"`},
		{"neither keys nor keyless", "rules:\n  - images: [nginx]\n", nil, 2,
			"rule has neither keys nor keyless"},
		{"empty keys", "rules:\n  - images: [nginx]\n    keys: []\n", nil, 3, "keys: empty"},
		{"missing key file", "rules:\n  - images: [nginx]\n    keys:\n      - a.pub\n      - keys/gone.pub\n", nil, 5,
			"keys/gone.pub: no such file or directory"},
		{"key file is a directory", "rules:\n  - images: [nginx]\n    keys: [keys]\n", map[string]string{"keys/x": ""}, 3,
			"keys: not a regular file: a directory"},
		{"key file not PEM", "rules:\n  - images: [nginx]\n    keys: [b.pub]\n", map[string]string{"b.pub": "ssh-ed25519 AAAA\n"}, 3,
			"b.pub: no PEM block"},
		{"key file a private key", "rules:\n  - images: [nginx]\n    keys: [b.key]\n",
			map[string]string{"b.key": "-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n"}, 3,
			`b.key: a "ENCRYPTED SIGSTORE PRIVATE KEY" PEM block, a private key`},
		{"key file a PUBLIC KEY block of garbage", "rules:\n  - images: [nginx]\n    keys: [b.pub]\n",
			map[string]string{"b.pub": "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"}, 3,
			"b.pub: not a public key"},
		{"trusted root not JSON", "rules:\n  - images: [nginx]\n    keyless:\n      trustedRoot: bad.json\n      identities: [{issuer: i, subject: s}]\n",
			map[string]string{"bad.json": "mediaType: x\n"}, 4, "bad.json: not JSON"},
		{"trusted root wrong mediaType", "rules:\n  - images: [nginx]\n    keyless:\n      trustedRoot: bad.json\n      identities: [{issuer: i, subject: s}]\n",
			map[string]string{"bad.json": `{"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json"}`}, 4,
			`bad.json: mediaType "application/vnd.dev.sigstore.bundle.v0.3+json": want "application/vnd.dev.sigstore.trustedroot+json;version=0.1"`},
		{"trusted root without mediaType", "rules:\n  - images: [nginx]\n    keyless:\n      trustedRoot: bad.json\n      identities: [{issuer: i, subject: s}]\n",
			map[string]string{"bad.json": `{"tlogs": []}`}, 4, "bad.json: no mediaType"},
		{"trusted root a JSON list", "rules:\n  - images: [nginx]\n    keyless:\n      trustedRoot: bad.json\n      identities: [{issuer: i, subject: s}]\n",
			map[string]string{"bad.json": `[]`}, 4, "bad.json: not a sigstore TrustedRoot"},
		{"trusted root missing", "rules:\n  - images: [nginx]\n    keyless:\n      trustedRoot: gone.json\n      identities: [{issuer: i, subject: s}]\n",
			nil, 4, "gone.json: no such file or directory"},
		{"keyless without trustedRoot", "rules:\n  - images: [nginx]\n    keyless:\n      identities: [{issuer: i, subject: s}]\n", nil, 4,
			"keyless has no trustedRoot"},
		{"keyless without identities", "rules:\n  - images: [nginx]\n    keyless:\n      trustedRoot: root.json\n", nil, 4,
			"keyless has no identities"},
		{"keyless empty", "rules:\n  - images: [nginx]\n    keyless:\n", nil, 3, "keyless: want a mapping of trustedRoot and identities, got nothing"},
		{"identity without issuer", "rules:\n  - images: [nginx]\n" + keyless + "        - issuer: i\n          subject: s\n        - subject: s\n", nil, 8,
			"identity has no issuer or issuerRegExp"},
		{"identity without subject", "rules:\n  - images: [nginx]\n" + keyless + "        - issuerRegExp: i\n", nil, 6,
			"identity has no subject or subjectRegExp"},
		{"identity with issuer twice", "rules:\n  - images: [nginx]\n" + keyless + "        - issuer: i\n          subject: s\n          issuerRegExp: j\n", nil, 8,
			"identity has both issuer and issuerRegExp: give one"},
		{"empty issuer", "rules:\n  - images: [nginx]\n" + keyless + "        - issuer: \"\"\n          subject: s\n", nil, 6,
			"issuer: empty"},
		{"bad regexp", "rules:\n  - images: [nginx]\n" + keyless + "        - issuer: i\n          subjectRegExp: \"^https://github.com/(example\"\n", nil, 7,
			`subjectRegExp "^https://github.com/(example": error parsing regexp: missing closing )`},
		{"second document", "rules:\n  - images: [nginx]\n    keys: [a.pub]\n---\nmode: enforce\n", nil, 4,
			"a second YAML document"},
		{"alias", "rules:\n  - images: &i [nginx]\n    keys: [a.pub]\n  - images: *i\n    keys: [a.pub]\n", nil, 4,
			"alias *i: a policy file has no aliases"},
		{"syntax error", "rules:\n  - images: [nginx\n    keys: [a.pub]\n", nil, 2, "did not find expected ',' or ']'"},
		{"tab indentation", "rules:\n\t- images: [nginx]\n", nil, 2, "found character that cannot start any token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := testPolicy(t, tc.text)
			for name, content := range tc.files {
				write(t, filepath.Join(filepath.Dir(path), name), content)
			}
			p, err := Load(path)
			if p != nil {
				t.Errorf("Load returned a policy with its error")
			}
			errs := lineErrors(t, err)
			if len(errs) != 1 {
				t.Fatalf("%d errors, want 1:\n%v", len(errs), err)
			}
			prefix := fmt.Sprintf("%s:%d: ", path, tc.line)
			if msg := errs[0].Error(); !strings.HasPrefix(msg, prefix) || !strings.Contains(msg, tc.want) {
				t.Errorf("error\n  %s\nwant\n  %s…%s…", msg, prefix, tc.want)
			}
		})
	}
}

func TestLoadReportsEveryError(t *testing.T) {
	t.Parallel()
	path := testPolicy(t, `mode: strict
rules:
  - images: [nginx, Redis]
    keys: [a.pub, gone.pub]
  - keys: [a.pub]
  - images: ["registry.example.com/*"]
    keyless:
      trustedRoot: root.json
      identities:
        - subject: s
          issuerRegExp: "(("
colour: blue
`)
	errs := lineErrors(t, func() error { _, err := Load(path); return err }())
	want := []struct {
		line int
		text string
	}{
		{1, `mode "strict"`},
		{3, `invalid pattern "Redis"`},
		{4, "gone.pub: no such file or directory"},
		{5, "rule has no images"},
		{11, `issuerRegExp "(("`},
		{12, `unknown key "colour"`},
	}
	if len(errs) != len(want) {
		t.Fatalf("%d errors, want %d:\n%v", len(errs), len(want), errors.Join(asErrors(errs)...))
	}
	for i, w := range want {
		if errs[i].Path != path || errs[i].Line != w.line || !strings.Contains(errs[i].Err.Error(), w.text) {
			t.Errorf("error %d: %v; want line %d, %q", i, errs[i], w.line, w.text)
		}
	}
}

func asErrors(les []LineError) []error {
	out := make([]error, len(les))
	for i, e := range les {
		out[i] = e
	}
	return out
}

func TestKeyTypes(t *testing.T) {
	t.Parallel()
	rsa2048, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	rsa1024, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		pub  crypto.PublicKey
		want string // "": accepted
	}{
		{"ecdsa P-256", &ecdsaKey(t, elliptic.P256()).PublicKey, ""},
		{"ecdsa P-384", &ecdsaKey(t, elliptic.P384()).PublicKey, ""},
		{"ecdsa P-521", &ecdsaKey(t, elliptic.P521()).PublicKey, ""},
		{"ecdsa P-224", &ecdsaKey(t, elliptic.P224()).PublicKey, "an ECDSA key on curve P-224"},
		{"rsa 2048", &rsa2048.PublicKey, ""},
		{"rsa 1024", &rsa1024.PublicKey, "a 1024-bit RSA key: want 2048 bits or more"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := testPolicy(t, "rules:\n  - images: [nginx]\n    keys: [k.pub]\n")
			writeKey(t, filepath.Join(filepath.Dir(path), "k.pub"), tc.pub)
			p, err := Load(path)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if got := p.Rules[0].Keys[0].Public; !reflect.DeepEqual(got, tc.pub) {
					t.Errorf("key %T, want %T", got, tc.pub)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), path+":3: ") {
				t.Errorf("error %v, want %s:3: …%s", err, path, tc.want)
			}
		})
	}
}

func TestLoadNamedPipe(t *testing.T) {
	t.Parallel()
	path := testPolicy(t, "rules:\n  - images: [nginx]\n    keys: [fifo.pub]\n")
	fifo := filepath.Join(filepath.Dir(path), "fifo.pub")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := Load(path); done <- err }()
	select {
	case err := <-done:
		if err == nil || err.Error() != path+":3: key "+fifo+": not a regular file: a named pipe" {
			t.Errorf("error %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Load blocked on a named pipe")
	}
}

func TestLoadBound(t *testing.T) {
	t.Parallel()
	path := testPolicy(t, "rules:\n"+strings.Repeat("# padding\n", MaxPolicyBytes/10+1))
	_, err := Load(path)
	if err == nil || err.Error() != "reading "+path+": larger than 1 MiB, more than a policy file may have" {
		t.Errorf("Load of a file over the bound: %v", err)
	}
	_, err = Load(filepath.Join(t.TempDir(), "gone.yaml"))
	if err == nil || !strings.Contains(err.Error(), "gone.yaml: no such file or directory") {
		t.Errorf("Load of a missing file: %v", err)
	}
}

func TestReload(t *testing.T) {
	t.Parallel()
	path := testPolicy(t, "mode: warn\nrules:\n  - images: [nginx]\n    keys: [a.pub]\n")
	old, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}

	write(t, path, "mode: enforce\nrules:\n  - images: [nginx]\n    keys: [a.pub]\n")
	p, err := Reload(old, path, Options{})
	if err != nil || p == old || p.Mode != Enforce {
		t.Fatalf("Reload of a good file = %+v, %v", p, err)
	}

	write(t, path, "mode: enforce\nrules:\n  - images: [nginx]\n    keys: [gone.pub]\n")
	again, err := Reload(p, path, Options{})
	if err == nil || !strings.Contains(err.Error(), path+":4: ") {
		t.Errorf("Reload of a bad file: error %v", err)
	}
	if again != p || again.Mode != Enforce || again.Rules[0].Keys[0].Path != filepath.Join(filepath.Dir(path), "a.pub") {
		t.Errorf("Reload of a bad file did not keep the last good policy: %+v", again)
	}

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if kept, err := Reload(p, path, Options{}); err == nil || kept != p {
		t.Errorf("Reload of a missing file = %p, %v; want the last good policy %p and an error", kept, err, p)
	}
}

func TestLineCount(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int{
		"":               0,
		"a":              1,
		"a\n":            1,
		"a\nb":           2,
		"a\r\nb\r\n":     2,
		"a\rb\r":         2,
		"a\r\rb":         3,
		"a\u2028b\u0085": 2,
		"\n\n":           2,
	} {
		if got := lineCount([]byte(in)); got != want {
			t.Errorf("lineCount(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestLoadErrorLinesWithCRLF(t *testing.T) {
	t.Parallel()
	path := testPolicy(t, strings.ReplaceAll("mode: enforce\nrules:\n  - images: [nginx]\n    keys: [a.pub]\n  - images: [redis]\n", "\n", "\r\n"))
	_, err := Load(path)
	if err == nil || err.Error() != path+":5: rule has neither keys nor keyless: give the keys that may sign its images, or a keyless trustedRoot and identities" {
		t.Errorf("error %v", err)
	}
}
