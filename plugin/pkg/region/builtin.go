package region

// builtin are the public cloud regions by their usual names, with the coordinates of the city
// they are in (or next to). Google Cloud regions are complete; AWS and Azure carry the common
// ones. Operators add or override regions with `coordinates`.
var builtin = map[string]Coord{
	// Google Cloud.
	"africa-south1":           {-26.20, 28.05},  // Johannesburg
	"asia-east1":              {24.07, 120.54},  // Changhua County, Taiwan
	"asia-east2":              {22.32, 114.17},  // Hong Kong
	"asia-northeast1":         {35.68, 139.69},  // Tokyo
	"asia-northeast2":         {34.69, 135.50},  // Osaka
	"asia-northeast3":         {37.57, 126.98},  // Seoul
	"asia-south1":             {19.08, 72.88},   // Mumbai
	"asia-south2":             {28.61, 77.21},   // Delhi
	"asia-southeast1":         {1.35, 103.82},   // Singapore
	"asia-southeast2":         {-6.21, 106.85},  // Jakarta
	"australia-southeast1":    {-33.87, 151.21}, // Sydney
	"australia-southeast2":    {-37.81, 144.96}, // Melbourne
	"europe-central2":         {52.23, 21.01},   // Warsaw
	"europe-north1":           {60.57, 27.20},   // Hamina
	"europe-north2":           {59.33, 18.07},   // Stockholm
	"europe-southwest1":       {40.42, -3.70},   // Madrid
	"europe-west1":            {50.45, 3.82},    // St. Ghislain
	"europe-west2":            {51.51, -0.13},   // London
	"europe-west3":            {50.11, 8.68},    // Frankfurt
	"europe-west4":            {53.44, 6.83},    // Eemshaven
	"europe-west6":            {47.38, 8.54},    // Zurich
	"europe-west8":            {45.46, 9.19},    // Milan
	"europe-west9":            {48.86, 2.35},    // Paris
	"europe-west10":           {52.52, 13.40},   // Berlin
	"europe-west12":           {45.07, 7.69},    // Turin
	"me-central1":             {25.29, 51.53},   // Doha
	"me-central2":             {26.43, 50.10},   // Dammam
	"me-west1":                {32.09, 34.78},   // Tel Aviv
	"northamerica-northeast1": {45.50, -73.57},  // Montreal
	"northamerica-northeast2": {43.65, -79.38},  // Toronto
	"northamerica-south1":     {20.59, -100.39}, // Queretaro
	"southamerica-east1":      {-23.55, -46.63}, // Sao Paulo
	"southamerica-west1":      {-33.45, -70.67}, // Santiago
	"us-central1":             {41.26, -95.86},  // Council Bluffs, Iowa
	"us-east1":                {33.20, -80.01},  // Moncks Corner, South Carolina
	"us-east4":                {39.04, -77.49},  // Ashburn, Virginia
	"us-east5":                {39.96, -83.00},  // Columbus, Ohio
	"us-south1":               {32.78, -96.80},  // Dallas
	"us-west1":                {45.60, -121.18}, // The Dalles, Oregon
	"us-west2":                {34.05, -118.24}, // Los Angeles
	"us-west3":                {40.76, -111.89}, // Salt Lake City
	"us-west4":                {36.17, -115.14}, // Las Vegas

	// AWS.
	"us-east-1":      {38.90, -77.40},  // Northern Virginia
	"us-east-2":      {40.00, -83.00},  // Ohio
	"us-west-1":      {37.40, -121.90}, // Northern California
	"us-west-2":      {45.80, -119.70}, // Oregon
	"ca-central-1":   {45.50, -73.60},  // Montreal
	"sa-east-1":      {-23.55, -46.63}, // Sao Paulo
	"eu-west-1":      {53.35, -6.26},   // Dublin
	"eu-west-2":      {51.51, -0.13},   // London
	"eu-west-3":      {48.86, 2.35},    // Paris
	"eu-central-1":   {50.11, 8.68},    // Frankfurt
	"eu-central-2":   {47.38, 8.54},    // Zurich
	"eu-north-1":     {59.33, 18.07},   // Stockholm
	"eu-south-1":     {45.46, 9.19},    // Milan
	"eu-south-2":     {41.60, -0.90},   // Aragon
	"ap-east-1":      {22.32, 114.17},  // Hong Kong
	"ap-south-1":     {19.08, 72.88},   // Mumbai
	"ap-northeast-1": {35.68, 139.69},  // Tokyo
	"ap-northeast-2": {37.57, 126.98},  // Seoul
	"ap-northeast-3": {34.69, 135.50},  // Osaka
	"ap-southeast-1": {1.35, 103.82},   // Singapore
	"ap-southeast-2": {-33.87, 151.21}, // Sydney
	"ap-southeast-3": {-6.21, 106.85},  // Jakarta
	"me-south-1":     {26.07, 50.56},   // Bahrain
	"me-central-1":   {24.45, 54.38},   // UAE
	"il-central-1":   {32.09, 34.78},   // Tel Aviv
	"af-south-1":     {-33.92, 18.42},  // Cape Town

	// Azure.
	"eastus":             {37.37, -79.82},  // Virginia
	"eastus2":            {36.67, -78.39},  // Virginia
	"centralus":          {41.59, -93.60},  // Iowa
	"westus":             {37.78, -122.42}, // California
	"westus2":            {47.23, -119.85}, // Washington
	"westus3":            {33.45, -112.07}, // Phoenix
	"canadacentral":      {43.65, -79.38},  // Toronto
	"brazilsouth":        {-23.55, -46.63}, // Sao Paulo
	"northeurope":        {53.35, -6.26},   // Ireland
	"westeurope":         {52.37, 4.90},    // Netherlands
	"uksouth":            {51.51, -0.13},   // London
	"francecentral":      {48.86, 2.35},    // Paris
	"germanywestcentral": {50.11, 8.68},    // Frankfurt
	"swedencentral":      {60.67, 17.14},   // Gavle
	"eastasia":           {22.32, 114.17},  // Hong Kong
	"southeastasia":      {1.35, 103.82},   // Singapore
	"japaneast":          {35.68, 139.69},  // Tokyo
	"koreacentral":       {37.57, 126.98},  // Seoul
	"centralindia":       {18.52, 73.86},   // Pune
	"australiaeast":      {-33.86, 151.21}, // New South Wales
	"southafricanorth":   {-26.20, 28.05},  // Johannesburg
	"uaenorth":           {25.27, 55.30},   // Dubai
}
