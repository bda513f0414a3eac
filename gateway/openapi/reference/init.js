// The reference page of one cairn service: Swagger UI over the document served beside it
// (<...>/docs/ shows <...>/openapi.json). A file of its own, as the page's CSP allows no
// inline script.
window.addEventListener("load", function () {
  window.ui = SwaggerUIBundle({
    url: new URL("../openapi.json", window.location.href).href,
    dom_id: "#swagger-ui",
    deepLinking: true,
    // "Try it out" stays a button to press first: a call such as destroy is real.
    tryItOutEnabled: false,
    // No badge from the online validator: the page talks to this origin only.
    validatorUrl: null,
  });
});
