// The reference page of one cairn service: Swagger UI over the document served beside it
// (<...>/docs/ shows <...>/openapi.json). A file of its own, as the page's CSP allows no
// inline script.
window.addEventListener("load", function () {
  // Served through the console (/console/svc/<service>/<path>, the way a signed-in session
  // reaches every service), the document's paths are the service's own: "Try it out" must
  // go the same way, or it would ask the console for a route it does not have.
  var through = window.location.pathname.match(/^(.*\/console\/svc\/[^/]+)\//);
  var base = through ? through[1] : "";
  window.ui = SwaggerUIBundle({
    url: new URL("../openapi.json", window.location.href).href,
    dom_id: "#swagger-ui",
    deepLinking: true,
    // "Try it out" stays a button to press first: a call such as destroy is real.
    tryItOutEnabled: false,
    // No badge from the online validator: the page talks to this origin only.
    validatorUrl: null,
    requestInterceptor: function (request) {
      var url = new URL(request.url, window.location.href);
      if (base && url.origin === window.location.origin && url.pathname.indexOf(base + "/") !== 0) {
        url.pathname = base + url.pathname;
        request.url = url.href;
      }
      return request;
    },
  });
});
