// Stylesheets imported for their side effect: Bun bundles them into the page's CSS.
declare module '*.css' {}
