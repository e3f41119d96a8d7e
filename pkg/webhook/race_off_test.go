//go:build !race

package webhook_test

// raceDetector says the tests run with the race detector.
const raceDetector = false
