// Package deploy checks what operators deploy agentbus with against the
// agentbus binary: the container image (make image), the Helm chart
// (deploy/helm/agentbus) and the dashboards and alerts
// (deploy/observability). It is a module of its own, so that helm,
// k8s.io/api, Prometheus and go-containerregistry stay out of agentbus's
// go.mod: a program importing agentbus inherits none of them.
package deploy
