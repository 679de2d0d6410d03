package kubeapi

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// execConfig is a kubeconfig user's exec credential plugin
// (client.authentication.k8s.io v1 or v1beta1).
type execConfig struct {
	Command    string   `yaml:"command"`
	Args       []string `yaml:"args"`
	APIVersion string   `yaml:"apiVersion"`
	Env        []struct {
		Name  string `yaml:"name"`
		Value string `yaml:"value"`
	} `yaml:"env"`
}

// execCred is what a plugin said.
type execCred struct {
	token   string
	cert    *tls.Certificate
	expires time.Time
}

// run runs the plugin (a command with no slash is looked up in PATH, one
// with a relative path from the kubeconfig's directory) and reads its
// ExecCredential.
func (x *execConfig) run(dir string) (*execCred, error) {
	name := x.Command
	if strings.ContainsRune(name, filepath.Separator) {
		name = resolve(dir, name)
	}
	cmd := exec.Command(name, x.Args...)
	cmd.Env = os.Environ()
	for _, e := range x.Env {
		cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
	}
	info, _ := json.Marshal(map[string]any{"apiVersion": x.APIVersion, "kind": "ExecCredential", "spec": map[string]any{"interactive": false}})
	cmd.Env = append(cmd.Env, "KUBERNETES_EXEC_INFO="+string(info))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("exec credential plugin %s: %w: %s", x.Command, err, strings.TrimSpace(stderr.String()))
	}
	var ec struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Status     *struct {
			Token                 string     `json:"token"`
			ClientCertificateData string     `json:"clientCertificateData"`
			ClientKeyData         string     `json:"clientKeyData"`
			ExpirationTimestamp   *time.Time `json:"expirationTimestamp"`
		} `json:"status"`
	}
	if err := json.Unmarshal(out, &ec); err != nil {
		return nil, fmt.Errorf("exec credential plugin %s: its output is not an ExecCredential: %w", x.Command, err)
	}
	if ec.Kind != "ExecCredential" || ec.Status == nil {
		return nil, fmt.Errorf("exec credential plugin %s: its output is not an ExecCredential with a status (kind %q)", x.Command, ec.Kind)
	}
	cred := &execCred{token: ec.Status.Token}
	if ec.Status.ExpirationTimestamp != nil {
		cred.expires = *ec.Status.ExpirationTimestamp
	}
	if ec.Status.ClientCertificateData != "" || ec.Status.ClientKeyData != "" {
		pair, err := tls.X509KeyPair([]byte(ec.Status.ClientCertificateData), []byte(ec.Status.ClientKeyData))
		if err != nil {
			return nil, fmt.Errorf("exec credential plugin %s: client certificate and key: %w", x.Command, err)
		}
		cred.cert = &pair
	}
	if cred.token == "" && cred.cert == nil {
		return nil, fmt.Errorf("exec credential plugin %s: neither a token nor a client certificate", x.Command)
	}
	return cred, nil
}
