package kubeapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/holdfast-project/holdfast/internal/imageset"
	"github.com/holdfast-project/holdfast/internal/report"
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
	what := "/api/v1/nodes"
	if selector != "" {
		what += "?labelSelector=" + url.QueryEscape(selector)
	}
	var out []Node
	err := c.list(ctx, nodes, what, metav1.ListOptions{LabelSelector: selector}, func(item []byte) error {
		var n Node
		if err := json.Unmarshal(item, &n); err != nil {
			return fmt.Errorf("decoding a Node: %w", err)
		}
		out = append(out, n)
		return nil
	})
	return out, err
}

// nodes is the Node resource.
var nodes = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}

// nodeImages is the NodeImages resource.
var nodeImages = schema.GroupVersionResource{Group: report.Group, Version: report.Version, Resource: report.Resource}

// NodeImages lists the NodeImages objects, a page of 500 at a time; bad
// says why each object that does not decode was left out. A cluster that
// does not serve the resource is an error that IsNotFound.
func (c *Client) NodeImages(ctx context.Context) (list []report.NodeImages, bad []error, err error) {
	err = c.list(ctx, nodeImages, report.NodeImagesPath, metav1.ListOptions{}, func(item []byte) error {
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

// imageSets is the ImageSet resource.
var imageSets = schema.GroupVersionResource{Group: report.Group, Version: report.Version, Resource: imageset.Resource}

// ImageSets lists the ImageSet objects, a page of 500 at a time; bad says
// why each object that does not decode was left out. A cluster that does
// not serve the resource (no CustomResourceDefinition) has none: no error.
func (c *Client) ImageSets(ctx context.Context) (list []imageset.ImageSet, bad []error, err error) {
	err = c.list(ctx, imageSets, imageset.Path, metav1.ListOptions{}, func(item []byte) error {
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

// list reads resource (what: its path, for a person) a page of 500 at a
// time and calls each with every item's JSON, in order.
func (c *Client) list(ctx context.Context, resource schema.GroupVersionResource, what string, opts metav1.ListOptions, each func(item []byte) error) error {
	opts.Limit = pageSize
	for {
		var page *unstructured.UnstructuredList
		err := c.retry(func() (err error) {
			page, err = c.dynamic.Resource(resource).List(ctx, opts)
			return err
		})
		if err != nil {
			return c.failed(what, err)
		}
		for i := range page.Items {
			item, err := page.Items[i].MarshalJSON()
			if err != nil {
				return fmt.Errorf("GET %s: encoding an item: %w", what, err)
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
