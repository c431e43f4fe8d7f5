// Package kubernetes holds the files that run the coresteer CoreDNS build as a Kubernetes
// cluster's DNS in place of the stock CoreDNS: the manifests (*.yaml), the image's Dockerfile and
// README.md. It has no Go API; its tests decode every manifest strictly into the Kubernetes API
// types and start the ConfigMap's Corefile with this build.
package kubernetes
