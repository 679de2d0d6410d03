package kubeapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"

	"github.com/holdfast-project/holdfast/internal/imageset"
	"github.com/holdfast-project/holdfast/internal/report"
)

// Client reads from one API server.
type Client struct {
	server string
	source string
	rest   *rest.RESTClient
	exec   bool // an exec credential plugin gives the credentials
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
	rc, err := rest.RESTClientFor(jsonOnly(cfg))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	return &Client{server: strings.TrimSuffix(cfg.Host, "/"), source: source, rest: rc, exec: cfg.ExecProvider != nil}, nil
}

// jsonOnly is cfg for a client that asks for JSON and reads the bodies
// itself, decoding only the API server's Status (a failure's reason and
// message) with a scheme of metav1's types alone.
func jsonOnly(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	scheme := runtime.NewScheme()
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	cfg.GroupVersion = &schema.GroupVersion{Version: "v1"}
	cfg.APIPath = "/api"
	cfg.ContentType, cfg.AcceptContentTypes = "application/json", "application/json"
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	return cfg
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

// Node is what holdfast reads of a Node: its name and labels, and its
// conditions. Its own type, not k8s.io/api's: that package's types of every
// core resource would double what check --cluster links for three fields.
type Node struct {
	metav1.ObjectMeta `json:"metadata"`
	Status            NodeStatus `json:"status"`
}

// NodeStatus is the part of a Node's status holdfast reads.
type NodeStatus struct {
	Conditions []NodeCondition `json:"conditions"`
}

// NodeCondition is one of a Node's conditions.
type NodeCondition struct {
	Type    string `json:"type"`
	Status  string `json:"status"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// Nodes lists the Nodes that selector (a label selector; "": every Node)
// matches, a page of 500 at a time.
func (c *Client) Nodes(ctx context.Context, selector string) ([]Node, error) {
	var out []Node
	err := c.list(ctx, nodesPath, selector, func(item []byte) error {
		var n Node
		if err := json.Unmarshal(item, &n); err != nil {
			return fmt.Errorf("decoding a Node: %w", err)
		}
		out = append(out, n)
		return nil
	})
	return out, err
}

// nodesPath is the Node resource's.
const nodesPath = "/api/v1/nodes"

// NodeImages lists the NodeImages objects, a page of 500 at a time; bad
// says why each object that does not decode was left out. A cluster that
// does not serve the resource is an error that IsNotFound.
func (c *Client) NodeImages(ctx context.Context) (list []report.NodeImages, bad []error, err error) {
	err = c.list(ctx, report.NodeImagesPath, "", func(item []byte) error {
		var ni report.NodeImages
		if err := json.Unmarshal(item, &ni); err != nil {
			bad = append(bad, fmt.Errorf("NodeImages %s: %w", nameOf(item), err))
			return nil
		}
		list = append(list, ni)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return list, bad, nil
}

// ImageSets lists the ImageSet objects, a page of 500 at a time; bad says
// why each object that does not decode was left out. A cluster that does
// not serve the resource (no CustomResourceDefinition) has none: no error.
func (c *Client) ImageSets(ctx context.Context) (list []imageset.ImageSet, bad []error, err error) {
	err = c.list(ctx, imageset.Path, "", func(item []byte) error {
		var set imageset.ImageSet
		if err := json.Unmarshal(item, &set); err != nil {
			bad = append(bad, fmt.Errorf("ImageSet %s: %w", nameOf(item), err))
			return nil
		}
		list = append(list, set)
		return nil
	})
	switch {
	case IsNotFound(err):
		return nil, nil, nil
	case err != nil:
		return nil, nil, err
	}
	return list, bad, nil
}

// nameOf is the name of the object item, for an error: "(no name)" when
// it has none.
func nameOf(item []byte) string {
	var obj struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	if json.Unmarshal(item, &obj) != nil || obj.Metadata.Name == "" {
		return "(no name)"
	}
	return obj.Metadata.Name
}

// list reads the resource at path (its objects that selector matches; "":
// all) a page of 500 at a time, and calls each with every item's JSON, in
// order, as it comes. The items are decoded once, by each, into their own
// types: a generic decoding (client-go's dynamic client) first builds a map
// of every field of every object, which for a thousand NodeImages objects
// of 70 KB costs seconds of CPU and hundreds of megabytes.
func (c *Client) list(ctx context.Context, path, selector string, each func(item []byte) error) error {
	what := path
	if selector != "" {
		what += "?labelSelector=" + url.QueryEscape(selector)
	}
	cont := ""
	for {
		req := c.rest.Get().AbsPath(path).Param("limit", strconv.Itoa(pageSize))
		if selector != "" {
			req = req.Param("labelSelector", selector)
		}
		if cont != "" {
			req = req.Param("continue", cont)
		}
		var body io.ReadCloser
		err := c.retry(func() (err error) {
			body, err = req.Stream(ctx) // with the API server's Status, when it failed
			return err
		})
		if err != nil {
			return c.failed(what, err)
		}
		meta, err := ReadPage(body, each)
		body.Close()
		if err != nil {
			return fmt.Errorf("GET %s%s: %w", c.server, what, err)
		}
		if cont = meta.Continue; cont == "" {
			return nil
		}
	}
}

// ReadPage reads a page of a list (JSON) as it streams, calling each with
// every item, and returns the list's metadata: where the next page starts
// (Continue, "": none) and the ResourceVersion to watch from.
func ReadPage(r io.Reader, each func(item []byte) error) (meta metav1.ListMeta, err error) {
	dec := json.NewDecoder(r)
	if err := expect(dec, json.Delim('{')); err != nil {
		return meta, err
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return meta, fmt.Errorf("reading the list: %w", err)
		}
		switch key {
		case "metadata":
			if err := dec.Decode(&meta); err != nil {
				return meta, fmt.Errorf("reading the list's metadata: %w", err)
			}
		case "items":
			if err := readItems(dec, each); err != nil {
				return meta, err
			}
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return meta, fmt.Errorf("reading the list: %w", err)
			}
		}
	}
	return meta, expect(dec, json.Delim('}'))
}

// readItems reads the items of a list (an array, or null), calling each
// with every one.
func readItems(dec *json.Decoder, each func(item []byte) error) error {
	tok, err := dec.Token()
	switch {
	case err != nil:
		return fmt.Errorf("reading the list's items: %w", err)
	case tok == nil:
		return nil
	case tok != json.Delim('['):
		return fmt.Errorf("the list's items are %v, not an array", tok)
	}
	for n := 0; dec.More(); n++ {
		var item json.RawMessage
		if err := dec.Decode(&item); err != nil {
			return fmt.Errorf("reading item %d of the list: %w", n, err)
		}
		if err := each(item); err != nil {
			return err
		}
	}
	return expect(dec, json.Delim(']'))
}

// expect reads the token want from dec.
func expect(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("reading the list: %w", err)
	}
	if tok != want {
		return fmt.Errorf("reading the list: %v where %v belongs", tok, want)
	}
	return nil
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

// failed names the request (what: its path) of an API server's answer that
// is not a success, with its status; client-go's other errors name it
// already.
func (c *Client) failed(what string, err error) error {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return err
	}
	code := int(status.Status().Code)
	return fmt.Errorf("GET %s%s: %d %s: %w", c.server, what, code, http.StatusText(code), err)
}
