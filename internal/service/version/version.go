// Package version holds the build's version, set by the Makefile with -ldflags.
package version

// Version is the release or git description of this build.
var Version = "dev"
