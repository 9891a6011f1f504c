package conformance

import "github.com/sandstep/sandstep/providers"

// Cases returns every case of the suite, in the order RunAll runs them.
// Names are stable: the command line and Options.Only/Skip use them.
func Cases() []Case {
	return []Case{
		{Name: "info", Core: true, Run: caseInfo},
		{Name: "lifecycle", Core: true, Run: caseLifecycle},
		{Name: "list-by-labels", Core: true, Requires: func(c providers.Capabilities) bool { return c.ListByLabels }, Run: caseListByLabels},
		{Name: "name-unique", Core: true, Requires: func(c providers.Capabilities) bool { return c.NamedSandboxes }, Run: caseNameUnique},
		{Name: "create-invalid", Core: true, Run: caseCreateInvalid},
		{Name: "terminate-twice", Core: true, Run: caseTerminateTwice},
		{Name: "after-terminate", Core: true, Run: caseAfterTerminate},
		{Name: "unknown-ids", Core: true, Run: caseUnknownIDs},
		{Name: "unsupported", Core: true, Run: caseUnsupported},

		{Name: "exec-exit-codes", Run: caseExecExitCodes},
		{Name: "exec-stdout-stderr", Run: caseExecStdoutStderr},
		{Name: "exec-env", Run: caseExecEnv},
		{Name: "exec-cwd", Run: caseExecCwd},
		{Name: "exec-stdin", Run: caseExecStdin},
		{Name: "exec-argv-shell", Run: caseExecArgvShell},
		{Name: "exec-large-output", Run: caseExecLargeOutput},
		{Name: "exec-timeout-kills-tree", Run: caseExecTimeout},
		{Name: "exec-cancel", Run: caseExecCancel},
		{Name: "exec-streaming", Requires: func(c providers.Capabilities) bool { return c.ExecStreaming }, Run: caseExecStreaming},

		{Name: "files-round-trip", Run: caseFilesRoundTrip},
		{Name: "files-offset-limit", Run: caseFilesOffsetLimit},
		{Name: "files-not-found", Core: true, Requires: hasFileAPI, Run: caseFilesNotFound},
		{Name: "files-invalid-path", Core: true, Requires: hasFileAPI, Run: caseFilesInvalidPath},
		{Name: "files-wrong-type", Core: true, Requires: hasFileAPI, Run: caseFilesWrongType},
		{Name: "files-failed-write", Core: true, Requires: hasFileAPI, Run: caseFilesFailedWrite},
		{Name: "files-list", Requires: hasFileAPI, Run: caseFilesList},
		{Name: "files-50mb", Heavy: true, Run: caseFilesLarge},

		{Name: "volumes-lifecycle", Core: true, Requires: hasVolumes, Run: caseVolumesLifecycle},
		{Name: "volumes-persist", Requires: hasVolumes, Run: caseVolumesPersist},
		{Name: "volumes-delete-mounted", Requires: hasVolumes, Run: caseVolumesDeleteMounted},

		{Name: "snapshots", Requires: hasSnapshots, Run: caseSnapshots},
		{Name: "snapshot-failed-setup", Requires: hasSnapshots, Run: caseSnapshotFailedSetup},
		{Name: "snapshot-delete-in-use", Requires: hasSnapshots, Run: caseSnapshotDeleteInUse},
		{Name: "snapshots-list", Requires: func(c providers.Capabilities) bool { return c.Snapshots && c.ListSnapshots }, Run: caseSnapshotsList},

		{Name: "limits-memory", Requires: enforces(providers.LimitMemory), Run: caseLimitsMemory},
		{Name: "limits-volume-capacity", Requires: func(c providers.Capabilities) bool {
			return c.Volumes && c.Limits.Enforces(providers.LimitVolumeCapacity)
		}, Run: caseLimitsVolumeCapacity},

		{Name: "network-none", NeedsHost: true, Requires: func(c providers.Capabilities) bool { return c.Supports(providers.NetworkNone) }, Run: caseNetworkNone},
		{Name: "network-all", NeedsHost: true, Requires: func(c providers.Capabilities) bool { return c.Supports(providers.NetworkAll) }, Run: caseNetworkAll},
		{Name: "network-allowlist", NeedsHost: true, Requires: func(c providers.Capabilities) bool { return c.Supports(providers.NetworkAllowlist) }, Run: caseNetworkAllowlist},

		{Name: "concurrency-20", Heavy: true, Run: caseConcurrency},
	}
}

func hasFileAPI(c providers.Capabilities) bool   { return c.FileAPI }
func hasVolumes(c providers.Capabilities) bool   { return c.Volumes }
func hasSnapshots(c providers.Capabilities) bool { return c.Snapshots }
