// Package compose holds the test of compose.yaml, Mango on one machine:
// it loads the file with the Compose Specification's reference loader and
// checks the services, their dependencies and their exposure.
package compose
