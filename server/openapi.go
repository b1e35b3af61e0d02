package server

import (
	_ "embed"
	"net/http"

	"github.com/gin-gonic/gin"
)

// OpenAPIPath is where every node serves its OpenAPI document.
const OpenAPIPath = "/openapi.json"

// openAPIDocument is the OpenAPI 3.1 description of every route New
// registers, written by hand; openapi_test.go fails when a route and the
// document disagree, and the end-to-end tests check every answer against it.
//
//go:embed openapi.json
var openAPIDocument []byte

// serveOpenAPI answers the embedded document; anyone may read it.
func serveOpenAPI(c *gin.Context) {
	c.Data(http.StatusOK, "application/json", openAPIDocument)
}
