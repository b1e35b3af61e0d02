package server

import (
	"errors"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/holdfast/holdfast/cluster"
)

// fail writes a JSON error body and stops the handler chain.
func fail(c *gin.Context, status int, msg string) {
	errReply(status, msg, nil).write(c)
}

// invalidReply is a 400 for a request that breaks a rule, naming the field
// when the error knows it.
func invalidReply(err error) reply {
	var fe interface{ FieldName() string }
	if errors.As(err, &fe) {
		return errReply(http.StatusBadRequest, err.Error(), gin.H{"field": fe.FieldName()})
	}
	return errReply(http.StatusBadRequest, err.Error(), nil)
}

// clusterReply maps an error from the cluster package. Only errors known to
// mean "nothing was written" are reported as safe to retry; anything else
// may have taken effect and is reported as outcome unknown.
func clusterReply(err error) reply {
	switch {
	case errors.Is(err, cluster.ErrInvalidMember):
		return invalidReply(err)
	case errors.Is(err, cluster.ErrUnknownMember):
		return errReply(http.StatusNotFound, err.Error(), nil)
	case errors.Is(err, cluster.ErrOutcomeUnknown):
		return retryLater("outcome unknown: the request may or may not have taken effect; retry it if it is safe to repeat, or read the state to find out", "unknown")
	case errors.Is(err, cluster.ErrNotLeader), errors.Is(err, cluster.ErrNotReady), errors.Is(err, cluster.ErrNoLeader):
		return retryLater("no leader is available to serve this request (election in progress or no quorum); nothing was changed, retry shortly", "not_applied")
	case errors.Is(err, cluster.ErrClockSkew):
		return retryLater("this node's clock is too far from the cluster's to lead; nothing was changed, retry shortly", "not_applied")
	case errors.Is(err, cluster.ErrBusy):
		return retryLater("the leader is overloaded; nothing was changed, retry shortly", "not_applied")
	}
	return retryLater("outcome unknown: the cluster could not confirm the request; it may or may not have taken effect", "unknown")
}
