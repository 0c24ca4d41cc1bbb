package daemon

import (
	"errors"

	"github.com/homefs/homefs/cas/badgerstore"
	"github.com/homefs/homefs/fusefs"
	"github.com/homefs/homefs/internal/api"
)

// classify maps an error to its code: by the sentinels of fusefs and the
// daemon's own, then by those api.Classify knows. fusefs wraps each of its
// sentinels alone, so checking them first changes no error's code.
func classify(err error) api.Code {
	var de *api.Error
	switch {
	case errors.As(err, &de):
		return de.Code
	case errors.Is(err, fusefs.ErrNotMounted), errors.Is(err, fusefs.ErrNotDirectory),
		errors.Is(err, fusefs.ErrNoSubtree):
		return api.CodeNotFound
	case errors.Is(err, fusefs.ErrBusy), errors.Is(err, fusefs.ErrSessionInUse):
		return api.CodeConflict
	case errors.Is(err, badgerstore.ErrDamaged), errors.Is(err, fusefs.ErrJournalDamaged):
		return api.CodeDamaged
	case errors.Is(err, fusefs.ErrInsideStore), errors.Is(err, fusefs.ErrMountOptions),
		errors.Is(err, errUsage):
		return api.CodeUsage
	}
	return api.Classify(err)
}

// errUsage marks argument errors found by the service itself.
var errUsage = errors.New("usage")

// toError turns any error into the wire form.
func toError(err error) *api.Error {
	var de *api.Error
	if errors.As(err, &de) {
		return de
	}
	return &api.Error{Code: classify(err), Message: err.Error()}
}

// httpStatus is the HTTP status of a code.
func httpStatus(c api.Code) int {
	switch c {
	case api.CodeUsage:
		return 400
	case api.CodePermission:
		return 403
	case api.CodeNotFound:
		return 404
	case api.CodeConflict:
		return 409
	case api.CodeCorrupt:
		return 422
	case api.CodeUnavailable:
		return 503
	case api.CodeNoSpace:
		return 507
	}
	return 500
}

// Classify returns the code of an error met outside a request (Serve's),
// which chooses homefsd's exit status.
func Classify(err error) api.Code { return classify(err) }
