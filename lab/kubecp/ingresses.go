package kubecp

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/homelab-migrate/migrate/lab/apps"
)

// What an ingress controller watches, for the lab's ingress-nginx
// stand-in (apps.Container.Routes): the Ingresses of its class, each
// path with the certificate spec.tls names for its host and the Service
// port it goes to, resolved to a Ready pod at each request as the
// controller's endpoints are (ClusterIPs are not routed in the lab).

// ingressRoutes are the paths of the cluster's Ingresses of class.
func (c *ControlPlane) ingressRoutes(ctx context.Context, class string) ([]apps.Route, error) {
	var list networkingv1.IngressList
	if err := c.do(ctx, http.MethodGet, "/apis/networking.k8s.io/v1/ingresses", "application/json", nil, &list); err != nil {
		return nil, err
	}

	var (
		routes []apps.Route
		errs   []string
	)

	for _, ing := range list.Items {
		if ing.DeletionTimestamp != nil || ing.Spec.IngressClassName == nil || *ing.Spec.IngressClassName != class {
			continue
		}

		certs, err := c.ingressCertificates(ctx, &ing)
		if err != nil {
			errs = append(errs, err.Error()) // its hosts get the fake certificate, as ingress-nginx does
		}

		for _, rule := range ing.Spec.Rules {
			if rule.HTTP == nil {
				continue
			}

			for _, p := range rule.HTTP.Paths {
				if p.Backend.Service == nil {
					continue
				}

				routes = append(routes, apps.Route{Namespace: ing.Namespace, Ingress: ing.Name,
					Host: strings.ToLower(rule.Host), Path: pathOrRoot(p.Path),
					Exact:       p.PathType != nil && *p.PathType == networkingv1.PathTypeExact,
					Certificate: certs[strings.ToLower(rule.Host)],
					Backend:     c.serviceBackend(ing.Namespace, *p.Backend.Service)})
			}
		}
	}

	if len(errs) > 0 {
		return routes, fmt.Errorf("%s", strings.Join(errs, "; "))
	}

	return routes, nil
}

func pathOrRoot(p string) string {
	if p == "" {
		return "/"
	}

	return p
}

// ingressCertificates are the certificates of ing's spec.tls by host,
// from their kubernetes.io/tls Secrets in ing's namespace.
func (c *ControlPlane) ingressCertificates(ctx context.Context, ing *networkingv1.Ingress) (map[string]*tls.Certificate, error) {
	certs := map[string]*tls.Certificate{}

	for _, t := range ing.Spec.TLS {
		var s corev1.Secret
		if err := c.do(ctx, http.MethodGet, "/api/v1/namespaces/"+ing.Namespace+"/secrets/"+t.SecretName, "application/json", nil, &s); err != nil {
			return certs, fmt.Errorf("ingress %s/%s: secret %q: %w", ing.Namespace, ing.Name, t.SecretName, err)
		}

		cert, err := tls.X509KeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
		if err != nil {
			return certs, fmt.Errorf("ingress %s/%s: secret %q holds no usable certificate: %w", ing.Namespace, ing.Name, t.SecretName, err)
		}

		for _, h := range t.Hosts {
			certs[strings.ToLower(h)] = &cert
		}
	}

	return certs, nil
}

// serviceBackend finds a Ready pod of the Service behind an Ingress
// path, at the targetPort of the Service port it names (by number or
// name).
func (c *ControlPlane) serviceBackend(ns string, b networkingv1.IngressServiceBackend) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		var svc corev1.Service
		if err := c.do(ctx, http.MethodGet, "/api/v1/namespaces/"+ns+"/services/"+b.Name, "application/json", nil, &svc); err != nil {
			return "", fmt.Errorf("service %s/%s: %w", ns, b.Name, err)
		}

		for _, sp := range svc.Spec.Ports {
			if (b.Port.Name != "" && sp.Name == b.Port.Name) || (b.Port.Name == "" && sp.Port == b.Port.Number) {
				return c.endpoint(ctx, nodePort{ns: ns, service: b.Name, port: sp})
			}
		}

		return "", fmt.Errorf("service %s/%s has no port %s", ns, b.Name, portName(b.Port))
	}
}

func portName(p networkingv1.ServiceBackendPort) string {
	if p.Name != "" {
		return p.Name
	}

	return fmt.Sprint(p.Number)
}
