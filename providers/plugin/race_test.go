//go:build race

package plugin_test

// raceEnabled builds the test plugins with the race detector too, so that
// the plugin side of the protocol is checked along with the host side.
const raceEnabled = true
