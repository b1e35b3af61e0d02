package server

import (
	"errors"
	"fmt"
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
	var se *cluster.StorageError
	switch {
	case errors.As(err, &se) && errors.Is(err, cluster.ErrOutcomeUnknown):
		return retryLater(fmt.Sprintf("outcome unknown: node %s could not write its %s (%s); the request may or may not have taken effect; retry it if it is safe to repeat, or read the state to find out",
			se.NodeID, se.Kind, se.Reason()), "unknown")
	case errors.As(err, &se):
		return storageReply(se)
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
	case errors.Is(err, cluster.ErrLevel):
		return retryLater(err.Error(), "not_applied")
	}
	return retryLater("outcome unknown: the cluster could not confirm the request; it may or may not have taken effect", "unknown")
}

// storageReply is a 507 for a request nothing was written for because a
// node cannot write its files: the leader's append failed for want of
// space, or this node, with no leader known, cannot write its own log. It
// names the node and the kind of file; the cluster may serve the request
// again once another node leads or space is freed.
func storageReply(se *cluster.StorageError) reply {
	r := errReply(http.StatusInsufficientStorage,
		fmt.Sprintf("node %s cannot write its %s (%s): nothing was changed; retry later (the operator must free space on that node)", se.NodeID, se.Kind, se.Reason()),
		gin.H{"outcome": "not_applied", "node_id": se.NodeID, "storage": se.Kind, "retry_after_seconds": 1})
	r.RetryAfter = 1
	return r
}
