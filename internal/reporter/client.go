package reporter

import (
	"fmt"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Client connects to the API server: with kubeconfig when it is set, else
// with the pod's service account (in-cluster config).
func Client(kubeconfig, userAgent string) (kubernetes.Interface, error) {
	c, _, err := Clients(kubeconfig, userAgent)
	return c, err
}

// Clients is Client and a dynamic client of the same connection, for the
// ImageSets and the NodeImages.
func Clients(kubeconfig, userAgent string) (kubernetes.Interface, dynamic.Interface, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, nil, fmt.Errorf("loading kubeconfig %s: %w", kubeconfig, err)
		}
	} else if cfg, err = rest.InClusterConfig(); err != nil {
		return nil, nil, fmt.Errorf("loading the in-cluster config (outside a pod, set --kubeconfig or KUBECONFIG): %w", err)
	}
	cfg.UserAgent = userAgent
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("making a client for %s: %w", cfg.Host, err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("making a client for %s: %w", cfg.Host, err)
	}
	return c, dyn, nil
}
