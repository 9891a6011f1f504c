package api

import "net/http"

func (s *server) sandyRoutes(mux *http.ServeMux) {}
