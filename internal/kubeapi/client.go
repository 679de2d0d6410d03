package kubeapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
)

// Client reads from one API server.
type Client struct {
	server  string
	source  string
	dynamic dynamic.Interface
	exec    bool // an exec credential plugin gives the credentials
}

// Connect loads the configuration and makes a client; it does no network
// I/O (an exec credential plugin runs at the first request).
func Connect(o Options) (*Client, error) {
	cfg, source, err := load(o)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = 30 * time.Second
	if o.UserAgent != "" {
		cfg.UserAgent = o.UserAgent
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	return &Client{server: strings.TrimSuffix(cfg.Host, "/"), source: source, dynamic: dyn, exec: cfg.ExecProvider != nil}, nil
}

// Server is the API server's URL.
func (c *Client) Server() string { return c.server }

// Source says where the configuration came from.
func (c *Client) Source() string { return c.source }

// IsNotFound says whether err is the API server's 404: an object, or a
// resource the server does not serve.
func IsNotFound(err error) bool { return apierrors.IsNotFound(err) }

// pageSize is how many items a page of a list holds.
const pageSize = 500

// Get reads one object's JSON (path: /api/v1/nodes/node-1,
// /apis/GROUP/VERSION/namespaces/NS/RESOURCE/NAME, …).
func (c *Client) Get(ctx context.Context, path string) (json.RawMessage, error) {
	t, err := parsePath(path)
	if err != nil {
		return nil, err
	}
	if t.name == "" {
		return nil, fmt.Errorf("GET %s: the path names a collection, not an object", path)
	}
	var obj *unstructured.Unstructured
	err = c.retry(func() (err error) {
		obj, err = c.resource(t).Get(ctx, t.name, metav1.GetOptions{})
		return err
	})
	if err != nil {
		return nil, c.failed(path, err)
	}
	return obj.MarshalJSON()
}

// List reads a collection (path: /api/v1/nodes, with a labelSelector or
// fieldSelector query or not) a page of 500 at a time and calls each with
// every item's JSON, in order.
func (c *Client) List(ctx context.Context, path string, each func(item json.RawMessage) error) error {
	t, err := parsePath(path)
	if err != nil {
		return err
	}
	if t.name != "" {
		return fmt.Errorf("GET %s: the path names an object, not a collection", path)
	}
	opts := t.list
	opts.Limit = pageSize
	for {
		var page *unstructured.UnstructuredList
		err := c.retry(func() (err error) {
			page, err = c.resource(t).List(ctx, opts)
			return err
		})
		if err != nil {
			return c.failed(path, err)
		}
		for i := range page.Items {
			item, err := page.Items[i].MarshalJSON()
			if err != nil {
				return fmt.Errorf("GET %s: encoding an item: %w", path, err)
			}
			if err := each(item); err != nil {
				return err
			}
		}
		if page.GetContinue() == "" {
			return nil
		}
		opts.Continue = page.GetContinue()
	}
}

func (c *Client) resource(t target) dynamic.ResourceInterface {
	r := c.dynamic.Resource(t.resource)
	if t.namespace != "" {
		return r.Namespace(t.namespace)
	}
	return r
}

// retry asks once more after a 401 when an exec credential plugin gives
// the credentials: client-go has run the plugin again on the 401 (its
// credential may have been revoked before it expired).
func (c *Client) retry(call func() error) error {
	err := call()
	if c.exec && apierrors.IsUnauthorized(err) {
		err = call()
	}
	return err
}

// failed names the request of an API server's answer that is not a
// success, with its status; client-go's other errors name it already.
func (c *Client) failed(path string, err error) error {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return err
	}
	code := int(status.Status().Code)
	return fmt.Errorf("GET %s%s: %d %s: %w", c.server, path, code, http.StatusText(code), err)
}
