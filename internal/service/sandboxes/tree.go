package sandboxes

import (
	"context"
	"errors"
	"fmt"

	"github.com/sandstep/sandstep/internal/service/store"
)

// Kinds of owners of direct sandboxes (package direct): a tenant holds the
// sandboxes its own token created; a sandbox holds its children, so that
// the ledger records every child's parent and a parent's release reaches
// them.
const (
	KindTenant  = "tenant"
	KindSandbox = "sandbox"
)

// TenantOwner is the owner of the sandboxes a tenant created directly.
func TenantOwner(tenant string) Owner { return Owner{Kind: KindTenant, Key: tenant, Tenant: tenant} }

// SandboxOwner is the owner of the children of the sandbox whose ledger
// name is name.
func SandboxOwner(name, tenant string) Owner {
	return Owner{Kind: KindSandbox, Key: name, Tenant: tenant}
}

// maxTreeDepth bounds the recursion of ReleaseTree: deeper than any tree
// the API lets agents build, so a ledger loop cannot recurse forever.
const maxTreeDepth = 32

// ReleaseTree releases the sandbox named name of owner and then,
// recursively, every sandbox it owns (its children, theirs...). The parent
// goes first, so that its token can start no child once the cascade ran
// past it; a child whose create was under way when its parent went is
// ended by its own Acquire (ErrReleased) or by Reconcile (parent gone). It
// returns the ledger names of the tree, the sandbox's own first. It is
// idempotent; a failure for one sandbox does not stop the others.
func (m *Manager) ReleaseTree(ctx context.Context, owner Owner, name, reason string) ([]string, error) {
	return m.releaseTree(ctx, owner, name, reason, 0)
}

func (m *Manager) releaseTree(ctx context.Context, owner Owner, name, reason string, depth int) ([]string, error) {
	var errs []error
	var closed []string
	if err := m.Release(ctx, owner, Ref{Name: name}, reason); err != nil {
		errs = append(errs, err)
	} else {
		closed = append(closed, name)
	}
	if depth >= maxTreeDepth {
		return closed, errors.Join(append(errs, fmt.Errorf("release %s: the tree is deeper than %d", name, maxTreeDepth))...)
	}
	children, err := m.st.LedgerListByOwner(ctx, SandboxOwner(name, owner.Tenant).String())
	if err != nil {
		return closed, errors.Join(append(errs, fmt.Errorf("ledger: %w", err))...)
	}
	for _, c := range children {
		// A closed child too: its own children may still live (the
		// reaper closed it before them), and its name is returned so that
		// records kept beside the ledger close with it.
		sub, err := m.releaseTree(ctx, SandboxOwner(name, owner.Tenant), c.Name, "parent terminated", depth+1)
		closed = append(closed, sub...)
		errs = append(errs, err)
	}
	return closed, errors.Join(errs...)
}

// parentGone says whether a child's parent sandbox is no longer live: its
// ledger entry is closed or unknown.
func (m *Manager) parentGone(ctx context.Context, e store.LedgerEntry) (bool, error) {
	owner := ParseOwner(e.Owner)
	if owner.Kind != KindSandbox {
		return false, nil
	}
	p, err := m.st.LedgerGet(ctx, owner.Key)
	if errors.Is(err, store.ErrNotFound) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return p.State == store.LedgerTerminated, nil
}
