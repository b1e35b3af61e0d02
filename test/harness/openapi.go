package harness

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// OpenAPIFile is the service's OpenAPI document, relative to the module
// root: the file the binary embeds and serves at /openapi.json.
const OpenAPIFile = "server/openapi.json"

// Responses to requests no route takes are described by these components
// of the document: the router's answers to an unknown path and to a method
// the path does not take.
const (
	unroutedPathResponse   = "NotFound"
	unroutedMethodResponse = "MethodNotAllowed"
)

// OpenAPIChecker checks answers against an OpenAPI document: each must be
// a status the matched operation documents, with the documented headers and
// a body its schema accepts.
type OpenAPIChecker struct {
	router routers.Router
	// unrouted are operations that hold only the documented answer to a
	// request no route takes, keyed by that answer's status.
	unrouted map[int]*routers.Route
}

// LoadOpenAPIChecker reads OpenAPIFile from the module root and returns a
// checker for it.
func LoadOpenAPIChecker(ctx context.Context) (*OpenAPIChecker, error) {
	goBin, err := goTool()
	if err != nil {
		return nil, err
	}
	root, err := moduleRoot(ctx, goBin)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(root, OpenAPIFile))
	if err != nil {
		return nil, err
	}
	return NewOpenAPIChecker(b)
}

// NewOpenAPIChecker parses and validates an OpenAPI document.
func NewOpenAPIChecker(document []byte) (*OpenAPIChecker, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(document)
	if err != nil {
		return nil, fmt.Errorf("load the OpenAPI document: %w", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("validate the OpenAPI document: %w", err)
	}
	// Operations are matched by path alone: the servers name the nodes'
	// default address, and tests run nodes on other ports.
	doc.Servers = nil
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("route the OpenAPI document: %w", err)
	}
	c := &OpenAPIChecker{router: router, unrouted: map[int]*routers.Route{}}
	for status, name := range map[int]string{http.StatusNotFound: unroutedPathResponse, http.StatusMethodNotAllowed: unroutedMethodResponse} {
		ref := doc.Components.Responses[name]
		if ref == nil {
			return nil, fmt.Errorf("the OpenAPI document has no components.responses.%s", name)
		}
		op := openapi3.NewOperation()
		op.Responses = openapi3.NewResponses(openapi3.WithStatus(status, ref))
		c.unrouted[status] = &routers.Route{Spec: doc, Operation: op}
	}
	return c, nil
}

// Check reports how the answer (status, header, body) to req departs from
// the document, or nil. req's body is not read. A request no operation
// matches must have the answer the document gives to an unknown path, or
// to a method its path does not take.
func (c *OpenAPIChecker) Check(req *http.Request, status int, header http.Header, body []byte) error {
	route, params, err := c.router.FindRoute(req)
	if err != nil {
		want := http.StatusNotFound
		if errors.Is(err, routers.ErrMethodNotAllowed) {
			want = http.StatusMethodNotAllowed
		}
		if status != want {
			return fmt.Errorf("no documented operation is %s %s (%v), so the answer must be HTTP %d, not %d", req.Method, req.URL.Path, err, want, status)
		}
		route, params = c.unrouted[want], nil
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 status,
		Header:                 header,
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	in.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		return fmt.Errorf("%s %s (operation %s %s): %w", req.Method, req.URL.Path, route.Method, route.Path, err)
	}
	return nil
}
