package kubeapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
)

// Client reads from one API server.
type Client struct {
	server string
	source string
	agent  string
	http   *http.Client
	cfg    *config
	exec   *execCache // nil without an exec plugin
}

// Connect loads the configuration and makes a client; it does no network
// I/O.
func Connect(o Options) (*Client, error) {
	cfg, err := load(o)
	if err != nil {
		return nil, err
	}
	tr, err := cfg.transport()
	if err != nil {
		return nil, err
	}
	c := &Client{server: strings.TrimSuffix(cfg.cluster.Server, "/"), source: cfg.source, agent: o.UserAgent, cfg: cfg,
		http: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
	if cfg.user.Exec != nil {
		c.exec = &execCache{cfg: cfg.user.Exec, dir: cfg.user.dir}
		tr.TLSClientConfig.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			cred, err := c.exec.get()
			if err != nil || cred.cert == nil {
				return &tls.Certificate{}, err
			}
			return cred.cert, nil
		}
	}
	if _, err := url.Parse(c.server); err != nil {
		return nil, fmt.Errorf("%s: server %q: %w", cfg.source, c.server, err)
	}
	return c, nil
}

// Server is the API server's URL.
func (c *Client) Server() string { return c.server }

// Source says where the configuration came from.
func (c *Client) Source() string { return c.source }

// StatusError is an API server's answer that is not a success.
type StatusError struct {
	Code    int
	Reason  string // the Status object's reason: NotFound, Forbidden, …
	Message string
	URL     string
}

func (e *StatusError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = e.Reason
	}
	return fmt.Sprintf("GET %s: %d %s: %s", e.URL, e.Code, http.StatusText(e.Code), msg)
}

// IsNotFound says whether err is the API server's 404: an object, or a
// resource the server does not serve.
func IsNotFound(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Code == http.StatusNotFound
}

// Get reads one object's JSON.
func (c *Client) Get(ctx context.Context, path string) (json.RawMessage, error) {
	return c.get(ctx, c.server+path)
}

// List reads a collection (path: /api/v1/nodes, with a query or not) a page
// of 500 at a time and calls each with every item's JSON, in order.
func (c *Client) List(ctx context.Context, path string, each func(item json.RawMessage) error) error {
	u, err := url.Parse(c.server + path)
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	q := u.Query()
	q.Set("limit", "500")
	for {
		u.RawQuery = q.Encode()
		body, err := c.get(ctx, u.String())
		if err != nil {
			return err
		}
		var page struct {
			Metadata struct {
				Continue string `json:"continue"`
			} `json:"metadata"`
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			return fmt.Errorf("GET %s: decoding the list: %w", u.Redacted(), err)
		}
		for _, it := range page.Items {
			if err := each(it); err != nil {
				return err
			}
		}
		if page.Metadata.Continue == "" {
			return nil
		}
		q.Set("continue", page.Metadata.Continue)
	}
}

// maxBody bounds one answer: a page of 500 large objects fits.
const maxBody = 512 << 20

func (c *Client) get(ctx context.Context, u string) ([]byte, error) {
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return nil, fmt.Errorf("GET %s: %w", u, err)
		}
		req.Header.Set("Accept", "application/json")
		if c.agent != "" {
			req.Header.Set("User-Agent", c.agent)
		}
		if err := c.authorize(req); err != nil {
			return nil, err
		}
		resp, err := c.http.Do(req)
		if err != nil {
			return nil, err // it names the method and URL
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("GET %s: %w", u, err)
		}
		if len(body) > maxBody {
			return nil, fmt.Errorf("GET %s: answer larger than %d bytes", u, maxBody)
		}
		if resp.StatusCode == http.StatusUnauthorized && c.exec != nil && attempt == 0 {
			c.exec.expire() // the plugin's credential may have been revoked early: ask it once more
			continue
		}
		if resp.StatusCode/100 != 2 {
			return nil, statusError(u, resp.StatusCode, body)
		}
		return body, nil
	}
}

func statusError(u string, code int, body []byte) error {
	se := &StatusError{Code: code, URL: u}
	var st struct {
		Kind    string `json:"kind"`
		Reason  string `json:"reason"`
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &st) == nil && st.Kind == "Status" {
		se.Reason, se.Message = st.Reason, st.Message
		return se
	}
	msg := strings.TrimSpace(string(body))
	if len(msg) > 512 {
		msg = msg[:512] + "…"
	}
	se.Message = msg
	return se
}

// authorize adds the user's credentials: a token (from its file when one
// is named, read each time: it rotates), basic auth, or the exec plugin's
// token.
func (c *Client) authorize(req *http.Request) error {
	u := c.cfg.user
	switch {
	case u.TokenFile != "": // it wins over token, as in client-go
		p := resolve(u.dir, u.TokenFile)
		b, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("%s: reading tokenFile %s: %w", c.source, p, err)
		}
		req.Header.Set("Authorization", "Bearer "+string(bytes.TrimSpace(b)))
	case u.Token != "":
		req.Header.Set("Authorization", "Bearer "+u.Token)
	case u.Username != "" || u.Password != "":
		req.SetBasicAuth(u.Username, u.Password)
	case c.exec != nil:
		cred, err := c.exec.get()
		if err != nil {
			return fmt.Errorf("%s: %w", c.source, err)
		}
		if cred.token != "" {
			req.Header.Set("Authorization", "Bearer "+cred.token)
		}
	}
	return nil
}

// execCache runs an exec credential plugin and keeps what it said until it
// expires.
type execCache struct {
	cfg *execConfig
	dir string

	mu   sync.Mutex
	cred *execCred
}

func (e *execCache) get() (*execCred, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cred != nil && (e.cred.expires.IsZero() || time.Now().Before(e.cred.expires)) {
		return e.cred, nil
	}
	cred, err := e.cfg.run(e.dir)
	if err != nil {
		return nil, err
	}
	e.cred = cred
	return cred, nil
}

func (e *execCache) expire() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.cred = nil
}
