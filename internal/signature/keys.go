package signature

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
)

// TrustedRootMediaType is the mediaType of the sigstore TrustedRoot JSON a
// keyless rule names.
const TrustedRootMediaType = "application/vnd.dev.sigstore.trustedroot+json;version=0.1"

// minRSABits is the smallest RSA key a policy accepts.
const minRSABits = 2048

// parsePublicKey reads the one PEM "PUBLIC KEY" block of a key file (as
// cosign writes cosign.pub) and returns the key and the block, re-encoded.
func parsePublicKey(data []byte) (crypto.PublicKey, []byte, error) {
	block, rest := pem.Decode(data)
	if block == nil {
		return nil, nil, errors.New(`no PEM block: want a "PUBLIC KEY" block, as cosign writes in cosign.pub`)
	}
	if next, _ := pem.Decode(rest); next != nil {
		return nil, nil, errors.New("more than one PEM block: give one public key per file")
	}
	if block.Type != "PUBLIC KEY" {
		if strings.Contains(block.Type, "PRIVATE KEY") {
			return nil, nil, fmt.Errorf(`a %q PEM block, a private key: give the public key (cosign.pub), and keep the private key off the node`, block.Type)
		}
		return nil, nil, fmt.Errorf(`a %q PEM block: want "PUBLIC KEY"`, block.Type)
	}
	pub, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("not a public key: %w", err)
	}
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256(), elliptic.P384(), elliptic.P521():
		default:
			return nil, nil, fmt.Errorf("an ECDSA key on curve %s: want P-256, P-384 or P-521", k.Curve.Params().Name)
		}
	case ed25519.PublicKey:
	case *rsa.PublicKey:
		if k.N.BitLen() < minRSABits {
			return nil, nil, fmt.Errorf("a %d-bit RSA key: want %d bits or more", k.N.BitLen(), minRSABits)
		}
	default:
		return nil, nil, fmt.Errorf("a %T: want an ECDSA, Ed25519 or RSA signing key", pub)
	}
	return pub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: block.Bytes}), nil
}

// readTrustedRoot reads a trusted root file and checks that it is JSON with
// the TrustedRoot mediaType; what else it holds is left to the verifier.
func readTrustedRoot(path string) ([]byte, error) {
	data, err := readLimit(path, MaxTrustedRootBytes, "a trusted root")
	if err != nil {
		return nil, err
	}
	var head struct {
		MediaType *string `json:"mediaType"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return nil, fmt.Errorf("not a sigstore TrustedRoot: want a JSON object with mediaType %q", TrustedRootMediaType)
		}
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	switch {
	case head.MediaType == nil:
		return nil, fmt.Errorf("no mediaType: want %q (a sigstore TrustedRoot)", TrustedRootMediaType)
	case *head.MediaType != TrustedRootMediaType:
		return nil, fmt.Errorf("mediaType %q: want %q (a sigstore TrustedRoot)", *head.MediaType, TrustedRootMediaType)
	}
	return data, nil
}
