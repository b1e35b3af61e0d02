package server

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/holdfast/holdfast/cluster"
)

// fail writes a JSON error body and stops the handler chain.
func fail(c *gin.Context, status int, msg string) {
	c.AbortWithStatusJSON(status, gin.H{"ok": false, "error": msg})
}

// unavailable writes a 503 with Retry-After.
func unavailable(c *gin.Context, retryAfter int, msg string, extra gin.H) {
	c.Header("Retry-After", strconv.Itoa(retryAfter))
	body := gin.H{"ok": false, "error": msg, "retry_after_seconds": retryAfter}
	for k, v := range extra {
		body[k] = v
	}
	c.AbortWithStatusJSON(http.StatusServiceUnavailable, body)
}

// clusterError answers an error from the cluster package: outcome unknown,
// retryable unavailability, invalid membership requests.
func clusterError(c *gin.Context, err error) {
	switch {
	case errors.Is(err, cluster.ErrOutcomeUnknown):
		unavailable(c, 1, "outcome unknown: the request may or may not have taken effect; retry it if it is safe to repeat, or read the state to find out", gin.H{"outcome": "unknown"})
	case errors.Is(err, cluster.ErrNotLeader), errors.Is(err, cluster.ErrNotReady), errors.Is(err, cluster.ErrNoLeader):
		unavailable(c, 1, "no leader is available to serve this request; nothing was changed, retry shortly", gin.H{"outcome": "not_applied"})
	case errors.Is(err, cluster.ErrBusy):
		unavailable(c, 1, "the leader is overloaded; nothing was changed, retry shortly", gin.H{"outcome": "not_applied"})
	case errors.Is(err, cluster.ErrInvalidMember):
		fail(c, http.StatusBadRequest, err.Error())
	case errors.Is(err, cluster.ErrUnknownMember):
		fail(c, http.StatusNotFound, err.Error())
	default:
		unavailable(c, 1, "the cluster could not complete the request; it may or may not have taken effect", gin.H{"outcome": "unknown"})
	}
}
