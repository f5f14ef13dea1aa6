// Package deploy holds the tests of Mango's deployment artefacts: the Helm
// chart (helm/mango), the compose file (compose/) and, in e2e/, the
// end-to-end run of the container images (images/).
//
// It is a module of its own, outside go.work and always built with
// GOWORK=off, so the Helm, Kubernetes, compose and testcontainers
// dependency graphs never reach the services' builds.
package deploy
