package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/holdfast/holdfast/internal/client"
)

// apiError is a non-2xx answer.
type apiError struct {
	Status  int
	Message string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("HTTP %d: %s", e.Status, e.Message)
}

// callJSON sends body (if not nil) as JSON to the API path under
// client.APIPrefix with an optional bearer token, and decodes a 2xx answer
// into out. A request of unknown outcome is not repeated.
func callJSON(ctx context.Context, c *client.Client, method, path, token string, body, out any) error {
	return callJSONWait(ctx, c, 0, method, path, token, body, out)
}

// callJSONWait is callJSON for a request the server may hold for up to wait.
func callJSONWait(ctx context.Context, c *client.Client, wait time.Duration, method, path, token string, body, out any) error {
	req := client.Request{Method: method, Path: client.APIPrefix + path, Token: token, Wait: wait}
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("encode %s: %w", path, err)
		}
		req.Body = b
	}
	resp, err := c.Do(ctx, req)
	if err != nil {
		return err
	}
	if !resp.OK() {
		return &apiError{Status: resp.Status, Message: resp.ErrorMessage()}
	}
	if out != nil {
		if err := json.Unmarshal(resp.Body, out); err != nil {
			return fmt.Errorf("decode %s: %w", path, err)
		}
	}
	return nil
}
